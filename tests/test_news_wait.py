"""An idle worker whose store cannot wait for news of work polls; it does
not claim again at once, in a loop (`stead.store.base.news`)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import stead
from stead import errors
from stead.store import seam


async def test_a_wait_that_fails_makes_the_idle_worker_poll_not_spin(
        store: stead.Store, caplog: pytest.LogCaptureFixture) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        return "done"

    claims = 0
    claim_unshared = store.database.claim_unshared

    async def counted(claim: seam.Claim) -> seam.UnsharedClaim:
        nonlocal claims
        claims += 1
        return await claim_unshared(claim)

    waits = store.database.wait_for_work
    failing = True

    async def wait(timeout: float, **how: Any) -> None:
        if failing:
            raise errors.StoreUnavailable("the listening connection is gone")
        await waits(timeout, **how)

    store.database.claim_unshared = counted  # type: ignore[method-assign]
    store.database.wait_for_work = wait  # type: ignore[method-assign]
    caplog.set_level(logging.INFO, logger="stead.store")
    worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.2))
    working = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(1.0)
        # Each failed wait waits out the poll: about five claims in a second,
        # where a spinning worker makes thousands.
        assert 2 <= claims <= 12, claims
        said = [r.getMessage() for r in caplog.records if "could not wait" in r.getMessage()]
        assert len(said) == 1, said  # said once, not at every poll
        assert "StoreUnavailable" in said[0] and "poll (every 0.2 s)" in said[0]

        # Work is still found, at the poll.
        info = await stead.Client(store, app).start(wf)
        assert await stead.Client(store, app).result(info.run_id, timeout=10.0) == "done"

        failing = False
        for _ in range(100):
            if any("hear news of work again" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the worker never said it hears news again")
    finally:
        worker.stop()
        await working
