"""A worker process for tests/test_queue_processes.py: three of them share
one database and claim the runs of queues with limits.

    python queue_worker.py --db URL --worker-id ID [--slots 4]

It works until nothing is left it can run (`run_until_idle`), then exits.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

import stead

app = stead.App("queued")
# The limits the test checks (it imports them from here).
CONCURRENCY = app.queue("conc", concurrency=3)
PER_WORKER = app.queue("perw", per_worker=1)
RATE = app.queue("rate", rate=(4, "1s"))


async def _hold(seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


@app.workflow()
async def hold(run: stead.Run, seconds: float) -> float:
    return await run.step("hold", _hold, seconds)


async def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--slots", type=int, default=4)
    args = p.parse_args(argv)
    store = await stead.open_store(args.db)
    try:
        worker = stead.Worker(app, store, stead.WorkerOptions(
            concurrency=args.slots, poll_interval=0.05, worker_id=args.worker_id))
        await worker.run_until_idle()
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
