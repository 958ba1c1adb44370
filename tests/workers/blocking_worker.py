"""A real worker process whose workflow blocks the event loop (tests/test_faults.py).

    python blocking_worker.py --db URL --lease SECONDS --id NAME

Workflow `crunch(seconds)` runs an async step that computes without awaiting
for `seconds` (a `time.sleep` stands in for the computation): the worker's
event loop runs nothing else meanwhile. The worker works until SIGTERM and
logs stead's warnings to stderr, one line each.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time

import stead
from stead import logs

app = stead.App("blocking")


async def hog(seconds: float) -> str:
    time.sleep(seconds)  # computing, never awaiting: the loop is held
    return "done"


@app.workflow()
async def crunch(run: stead.Run, seconds: float) -> str:
    return await run.step("crunch", hog, seconds)


async def main(db: str, lease: float, worker_id: str) -> None:
    store = await stead.open_store(db)
    worker = stead.Worker(app, store, stead.WorkerOptions(
        lease_seconds=lease, poll_interval=0.05, worker_id=worker_id))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    try:
        await worker.run()
    finally:
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--lease", type=float, required=True)
    parser.add_argument("--id", required=True)
    ns = parser.parse_args()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logs.TextFormatter())
    logging.getLogger("stead").addHandler(handler)
    logging.getLogger("stead").setLevel(logging.WARNING)
    asyncio.run(main(ns.db, ns.lease, ns.id))
