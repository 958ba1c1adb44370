"""The worker process the crash matrix starts, and kills.

    python -m stead.testing._worker_process < CONFIG

It imports stead, then reads its orders as one line of JSON on stdin:

    {"app": "MODULE:APP", "db": URL, "cwd": DIR, "env": {...}, "log": FILE,
     "crash": "before:N[:name]" | "after:N[:name]" | null, "tally": FILE | null,
     "lease": SECONDS, "worker_id": ID}

so the matrix starts the next process while the current point runs, and the
orders reach it once the point is known (the database URL never shows in `ps`).
It moves to `cwd` (the point's folder: relative paths of the app and its fake
services stay inside it), writes its output to `log`, and runs a
`stead.Worker` for the app on a `CrashingStore` that SIGKILLs it at the crash
point (with none, at no point). SIGTERM stops it gracefully; then, with
`tally`, it writes what it journaled, one entry per journal write
(`tally_entry`), as JSON: the reference run's list of boundaries. An empty
stdin (the matrix is done) makes it exit at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from stead.app import App
from stead.store import open_store
from stead.store.seam import FencedWrite
from stead.testing.crash import CrashingStore, CrashPoint
from stead.worker import Worker, WorkerOptions

NEVER = 10**9  # a journal write no run reaches: the crash point of a worker that must not die


def load_app(spec: str) -> App:
    """`module:attribute` -> the `stead.App` it names."""
    module_name, _sep, attr = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, App):
        raise SystemExit(f"{spec} is a {type(obj).__qualname__}, not a stead.App")
    return obj


def crash_point(text: str | None) -> CrashPoint:
    """`before:3`, `after:1:charge` -> a CrashPoint; None -> a point never reached."""
    if text is None:
        return CrashPoint(after_commit=NEVER)
    when, number, *name = text.split(":", 2)
    n, call = int(number), (name[0] if name else None)
    if when == "before":
        return CrashPoint(before_commit=n, name=call)
    if when == "after":
        return CrashPoint(after_commit=n, name=call)
    raise SystemExit(f"bad --crash {text!r}: use before:N[:name] or after:N[:name]")


def tally_entry(write: FencedWrite) -> dict[str, Any]:
    """What the matrix needs of one journal write: its records' (kind, name,
    status) and how it ends the run's attempt, if it does."""
    return {
        "records": [[r.kind, r.name, r.status] for r in write.records],
        "finish": None if write.finish is None else str(write.finish.status),
    }


async def work(orders: dict[str, Any]) -> None:
    os.chdir(orders["cwd"])
    os.environ.update(orders["env"])
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    log = os.open(orders["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = load_app(orders["app"])
    inner = await open_store(orders["db"])
    store = CrashingStore(inner, crash_point(orders["crash"]))
    worker = Worker(app, store, WorkerOptions(
        lease_seconds=float(orders["lease"]), poll_interval=0.05,
        worker_id=orders["worker_id"]))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    try:
        await worker.run()
    finally:
        await inner.close()
    if orders["tally"] is not None:
        Path(orders["tally"]).write_text(json.dumps([tally_entry(w) for w in store.written]))


def main() -> None:
    with contextlib.suppress(ImportError):  # warm up the PostgreSQL driver, if installed
        importlib.import_module("stead.store.postgres")
    line = sys.stdin.readline()
    if not line.strip():
        return
    asyncio.run(work(json.loads(line)))


if __name__ == "__main__":
    main()
