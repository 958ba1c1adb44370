"""A real worker process hosting an app of tests/workers (the SDK integrations'
tests), optionally dying (SIGKILL) right after a chosen journal write commits.

    python sdk_worker.py --db URL --app tests.workers.agents_app:app
        [--crash after:N[:name]] [--lease 1.0] [--stay]

It stops (exit 0) once no run is pending or running, unless --stay (then it
runs until killed); SIGTERM stops it too.
The app's own files go to $SDK_DIR."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import stead
from stead.testing import CrashingStore
from tests.workers.crash_worker import crash_point, until_done


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--app", required=True)
    p.add_argument("--crash")
    p.add_argument("--lease", type=float, default=1.0)
    p.add_argument("--stay", action="store_true")
    args = p.parse_args()
    module, _, name = args.app.partition(":")
    app = getattr(importlib.import_module(module), name)
    inner = await stead.open_store(args.db)
    store: stead.Store = inner
    if args.crash:
        store = CrashingStore(store, crash_point(args.crash))
    worker = stead.Worker(app, store, stead.WorkerOptions(
        lease_seconds=args.lease, poll_interval=0.05))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    watcher = None if args.stay else asyncio.create_task(until_done(inner, worker))
    try:
        await worker.run()
    finally:
        if watcher is not None:
            watcher.cancel()
        await inner.close()


if __name__ == "__main__":
    asyncio.run(main())
