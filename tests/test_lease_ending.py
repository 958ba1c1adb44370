"""A renewal that finds a lease gone while its run's last write is on its way
back: the finish (or the suspension) committed, its answer not yet home. The
write's own outcome says whether the lease held, so the worker neither warns
of a lost run, nor counts it lost, nor stops the run; a lease taken while the
run still works is lost as before."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import stead
from stead.records import Fence, RunStatus
from stead.store.base import Store
from stead.testing import DelegatingStore

LEASE = 0.6  # renewed every 0.2 s


def _lost_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "lost run" in r.getMessage()]


def _count_renewals(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many renewals were made (by any store object: the keeper's twin too)."""
    made = [0]
    renew = Store.renew

    async def counted(self: Store, *args: Any, **kwargs: Any) -> list[Fence]:
        made[0] += 1
        return await renew(self, *args, **kwargs)

    monkeypatch.setattr(Store, "renew", counted)
    return made


async def test_a_finish_whose_answer_comes_back_late_is_not_a_lost_lease(
        store: stead.Store, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    app = stead.App("t")

    @app.workflow()
    async def quick(run: stead.Run) -> str:
        return "done"

    renewals = _count_renewals(monkeypatch)
    late: list[int] = []

    class LateAnswer(DelegatingStore):
        """The finish commits, and its answer takes a second to come back:
        renewals run meanwhile."""

        async def finish(self, *args: Any, **kwargs: Any) -> None:
            await self.inner.finish(*args, **kwargs)
            late.append(renewals[0])
            await asyncio.sleep(1.0)
            late.append(renewals[0])

    info = await stead.Client(store, app).start(quick)
    worker = stead.Worker(app, LateAnswer(store), stead.WorkerOptions(lease_seconds=LEASE))
    with caplog.at_level(logging.INFO, logger="stead"):
        await worker.run_until_idle()
    assert late[1] - late[0] >= 2  # renewals found the lease gone meanwhile
    assert _lost_lines(caplog) == []
    run = await store.get_run(info.run_id)
    assert (run.status, run.epoch) == (RunStatus.COMPLETED, 1)


async def test_a_lease_taken_while_the_run_still_works_is_lost(
        store: stead.Store, caplog: pytest.LogCaptureFixture) -> None:
    app = stead.App("t")
    working = asyncio.Event()
    go_on = asyncio.Event()
    bodies: list[int] = []

    @app.workflow()
    async def held(run: stead.Run) -> str:
        bodies.append(1)
        working.set()
        await go_on.wait()
        return "done"

    info = await stead.Client(store, app).start(held)
    worker = stead.Worker(app, store, stead.WorkerOptions(lease_seconds=LEASE))
    with caplog.at_level(logging.INFO, logger="stead"):
        running = asyncio.create_task(worker.run_until_idle())
        await asyncio.wait_for(working.wait(), 10)
        # Taken from it, as a takeover would: the holder's next renewal finds it gone.
        await store.release(Fence(info.run_id, 1, worker.id))
        deadline = asyncio.get_running_loop().time() + 10
        while not _lost_lines(caplog):
            assert asyncio.get_running_loop().time() < deadline, "the loss went unnoticed"
            await asyncio.sleep(0.05)
        go_on.set()
        await asyncio.wait_for(running, 30)
    assert any(info.run_id in line for line in _lost_lines(caplog))
    run = await store.get_run(info.run_id)
    assert run.status == RunStatus.COMPLETED and run.epoch == 2  # claimed again, then ended
    assert len(bodies) == 2
