"""A worker process for tests/test_tenant_processes.py: several of them share
one database and claim the runs of tenants, one of them limited.

    python tenant_worker.py --db URL --worker-id ID [--slots 3]

It works until it is killed (the test kills some with SIGKILL mid-run).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

import stead

app = stead.App("tenanted")
# The limit the test checks (it imports it from here).
CAPPED = "capped"
CONCURRENCY = 3
app.tenant(CAPPED, concurrency=CONCURRENCY)
LEASE = 2.0


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
    p.add_argument("--slots", type=int, default=3)
    args = p.parse_args(argv)
    store = await stead.open_store(args.db)
    try:
        worker = stead.Worker(app, store, stead.WorkerOptions(
            concurrency=args.slots, poll_interval=0.05, worker_id=args.worker_id,
            lease_seconds=LEASE,
            # Every slot claims, whatever the default: the test counts the
            # other tenant's runs going on beside the limited one's, which a
            # slot kept on each worker for a newcomer tenant would hold to three.
            tenant_headroom=0))
        await worker.run()
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
