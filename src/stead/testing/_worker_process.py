"""The worker processes the crash matrix starts, and kills.

    python -c 'from stead.testing._worker_process import main; main()' [MODULE ...]

This is a fork server: it imports stead and the MODULEs named (libraries the
app imports), then, for each line of orders it reads on stdin, forks a worker
and writes `started PID` on stdout; as each worker ends it writes
`exited PID CODE` (CODE negative: the signal that ended it). A fork of a warm
process starts in milliseconds where a new interpreter would import
everything again on the point's critical path. The orders are one line of
JSON (the database URL never shows in `ps`):

    {"app": "MODULE:APP", "db": URL, "cwd": DIR, "env": {...}, "log": FILE,
     "crash": "before:N[:name]" | "after:N[:name]" | null, "tally": FILE | null,
     "lease": SECONDS, "worker_id": ID}

The worker moves to `cwd` (the point's folder: relative paths of the app and
its fake services stay inside it), sets `env`, and only then imports the app,
which may read both as it loads. It writes its output to `log` and runs a
`stead.Worker` for the app on a `CrashingStore` that SIGKILLs it at the crash
point (with none, at no point). SIGTERM stops it gracefully; then, with
`tally`, it writes what it journaled, one entry per journal write
(`tally_entry`), as JSON: the reference run's list of boundaries. An empty
stdin (the matrix is done) ends the server, killing any worker still alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import select
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

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
    for name in sys.argv[1:]:  # the matrix imported each already: they import here too
        importlib.import_module(name)
    Server().serve()


class Server:
    """Forks a worker for each line of orders on stdin; reports on stdout."""

    def __init__(self) -> None:
        self.alive: set[int] = set()
        self.pending = b""

    def serve(self) -> None:
        while True:
            # Asleep on stdin when no worker is left to reap.
            ready, _, _ = select.select([0], [], [], 0.005 if self.alive else None)
            if ready and not self._read():
                break
            self._reap(os.WNOHANG)
        for pid in self.alive:  # the matrix is done: nothing may outlive it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._reap(0)

    def _read(self) -> bool:
        chunk = os.read(0, 65536)
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            if line.strip():
                self._fork(json.loads(line))
        return bool(chunk)

    def _fork(self, orders: dict[str, Any]) -> None:
        pid = os.fork()
        if pid == 0:
            _worker(orders)
        self.alive.add(pid)
        _report(f"started {pid}")

    def _reap(self, options: int) -> None:
        """Report the workers that ended (with `os.WNOHANG`), or all of them."""
        while self.alive:
            pid, status = os.waitpid(-1, options)
            if pid == 0:
                return
            self.alive.discard(pid)
            _report(f"exited {pid} {os.waitstatus_to_exitcode(status)}")


def _report(line: str) -> None:
    os.write(1, line.encode() + b"\n")


def _worker(orders: dict[str, Any]) -> NoReturn:
    """The forked child: run the worker the orders describe, then exit
    without returning into the server's loop."""
    code = 0
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)  # the orders are the server's
        os.dup2(2, 1)  # so are its reports: until the log is open, say it in the server's
        asyncio.run(work(orders))
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
