"""A worker for `python -m bench.takeover`: one long run of short steps, each
step appending "<worker> <step> <monotonic time>" to a file (CLOCK_MONOTONIC
is the machine's, so times from two processes compare).

    python -m bench.w_takeover --db URL --worker-id ID --log FILE [--lease 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time

import stead

app = stead.App("bench-takeover")
LOG = ""
WORKER = ""


def _append(line: str) -> None:
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def tick(i: int) -> int:
    _append(f"{WORKER} {i} {time.monotonic():.6f}")
    await asyncio.sleep(0.02)
    return i


@app.workflow(version=1)
async def steps(run: stead.Run, n: int) -> int:
    for i in range(n):
        await run.step(f"s{i}", tick, i)
    return n


async def main() -> None:
    global LOG, WORKER
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--lease", type=float, default=30.0)
    args = p.parse_args()
    LOG, WORKER = args.log, args.worker_id
    store = await stead.open_store(args.db)
    worker = stead.Worker(app, store, stead.WorkerOptions(
        worker_id=args.worker_id, lease_seconds=args.lease, poll_interval=0.05))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    try:
        await worker.run()
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
