"""A worker that lost its run to a takeover, for tests: `stale_worker`.

    info = await client.start(wf, 1)
    stale = await stead.testing.stale_worker(store, info.run_id)
    with pytest.raises(stead.StaleLease):
        await stale.write()           # what its next journal write meets
    assert stale.fencing_token < stale.current_token   # what your downstream compares

A worker that pauses past its lease (a long GC, a blocking call, a laptop lid)
finds another worker holding its run at a newer epoch; every write it makes is
refused with `StaleLease`. Hand `fencing_token` and `current_token` to a fake of
your downstream service to test that it refuses the stale writer's request
(`op.fencing_token` is that epoch in an effect). The run is left runnable: a
worker started afterwards takes it over and finishes it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from stead import errors
from stead.clock import FakeClock
from stead.records import Fence
from stead.store.base import Store

STALE_WORKER = "stead-testing-stale-worker"
TAKEOVER_WORKER = "stead-testing-takeover"
_LEASE = 0.05  # the stale worker's lease: over almost at once


@dataclasses.dataclass(frozen=True)
class StaleWorker:
    """Held run `run_id` at epoch `fencing_token`; the run is now at
    `current_token`, taken over by another worker."""

    store: Store
    run_id: str
    fencing_token: int
    current_token: int

    async def write(self) -> None:
        """The journal write this worker would make next: raises `StaleLease`."""
        await self.store.append(Fence(self.run_id, self.fencing_token, STALE_WORKER), [])

    async def renew(self) -> bool:
        """Try to renew the lease, as its heartbeat would: False, it is lost."""
        fence = Fence(self.run_id, self.fencing_token, STALE_WORKER)
        return not await self.store.renew([fence], 30.0)


async def stale_worker(store: Store, run_id: str, *, timeout: float = 5.0) -> StaleWorker:
    """Claim `run_id` (pending, or its lease expired) as a worker whose lease
    then runs out, let another worker take it over, and return the first:
    a worker holding a stale lease. The run is released again, runnable."""
    row = await store.get_run(run_id)
    hosted = [f"{row.workflow}@{row.version}"]
    first = await _claim(store, run_id, hosted, STALE_WORKER, _LEASE, timeout)
    if isinstance(store.clock, FakeClock):
        store.clock.advance(_LEASE * 2)
    second = await _claim(store, run_id, hosted, TAKEOVER_WORKER, 30.0, timeout)
    await store.release(Fence(run_id, second, TAKEOVER_WORKER))
    return StaleWorker(store, run_id, first, second)


async def _claim(store: Store, run_id: str, hosted: list[str], worker: str, lease: float,
                 timeout: float) -> int:
    deadline = time.monotonic() + timeout
    others: list[str] = []
    while True:
        claimed = await store.claim(worker, hosted, lease, 1, exclude=others)
        for row in claimed:
            if row.run_id == run_id:
                return row.epoch
            # Another runnable run of the workflow: give it back and look past it.
            await store.release(Fence(row.run_id, row.epoch, worker))
            others.append(row.run_id)
        if time.monotonic() > deadline:
            status = (await store.get_run(run_id)).status
            raise errors.SteadError(
                f"run {run_id} could not be claimed within {timeout:g} s (it is {status}): "
                "stale_worker needs a run no live worker holds; start it without a worker, "
                "or stop the worker first")
        await asyncio.sleep(0.02)
