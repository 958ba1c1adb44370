"""Workers: claiming, concurrency, versions, cancellation and graceful stops."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

import pytest

import stead
from stead.records import RunRow
from stead.testing import DelegatingStore


async def _wait_for(pred, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not await pred():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_task_id_makes_start_idempotent_among_live_runs(store: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run, order: str) -> str:
        return order

    client = stead.Client(store, app)
    a = await client.start(wf, "123", task_id="order-123")
    b = await client.start(wf, "123", task_id="order-123")
    assert a.created and not b.created and a.run_id == b.run_id
    await stead.Worker(app, store).run_until_idle()
    c = await client.start(wf, "123", task_id="order-123")  # the first one is over
    assert c.created and c.run_id != a.run_id


async def test_runs_execute_concurrently_on_one_loop(store: stead.Store) -> None:
    app = stead.App("t")
    inside = 0
    peak = 0

    async def slow() -> None:
        nonlocal inside, peak
        inside += 1
        peak = max(peak, inside)
        await asyncio.sleep(0.05)
        inside -= 1

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        await run.step("slow", slow)

    client = stead.Client(store, app)
    ids = [(await client.start(wf)).run_id for _ in range(8)]
    await stead.Worker(app, store, stead.WorkerOptions(concurrency=4)).run_until_idle()
    assert peak == 4
    assert {(await client.get(i)).status for i in ids} == {"completed"}


async def test_a_worker_claims_only_versions_it_hosts(store: stead.Store) -> None:
    v1 = stead.App("t")

    @v1.workflow(name="wf", version=1)
    async def wf1(run: stead.Run) -> int:
        return 1

    v2 = stead.App("t")

    @v2.workflow(name="wf", version=2)
    async def wf2(run: stead.Run) -> int:
        return 2

    client = stead.Client(store)
    old = await client.start(wf1)
    new = await client.start(wf2)
    await stead.Worker(v2, store).run_until_idle()
    assert (await client.get(old.run_id)).status == "pending"
    assert await client.result(new.run_id) == 2
    await stead.Worker(v1, store).run_until_idle()
    assert await client.result(old.run_id) == 1


async def test_cancel_stops_the_holder_at_its_next_call_boundary(store: stead.Store) -> None:
    app = stead.App("t")
    started = asyncio.Event()
    release = asyncio.Event()
    after = 0

    async def block() -> None:
        started.set()
        await release.wait()

    def later() -> None:
        nonlocal after
        after += 1

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        await run.step("block", block)
        await run.step("later", later)

    client = stead.Client(store, app)
    info = await client.start(wf)
    worker = stead.Worker(app, store)  # it hears of the request within a second
    task = asyncio.create_task(worker.run_until_idle())
    await started.wait()
    asked = await client.cancel(info.run_id)
    assert (asked.status, asked.cancel_requested) == ("running", True)
    await asyncio.sleep(1.5)
    release.set()
    await task
    assert after == 0
    # The call in flight was journaled; the next one was never made.
    assert [r.name for r in await client.journal(info.run_id)] == ["block"]
    assert (await client.get(info.run_id)).status == "cancelled"


async def test_graceful_stop_releases_at_the_next_call_boundary(store: stead.Store) -> None:
    app = stead.App("t")
    started = asyncio.Event()
    release = asyncio.Event()

    async def block() -> str:
        started.set()
        await release.wait()
        return "finished in flight"

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        first = await run.step("block", block)
        await run.step("next", lambda: None)
        return first

    client = stead.Client(store, app)
    info = await client.start(wf)
    worker = stead.Worker(app, store)
    task = asyncio.create_task(worker.run())
    await started.wait()
    worker.stop()
    release.set()
    await task
    journal = await client.journal(info.run_id)
    assert [r.name for r in journal] == ["block"]  # the in-flight step was kept
    row = await client.get(info.run_id)
    assert row.status == "running" and row.lease_owner is None  # released, claimable now
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id) == "finished in flight"


async def test_run_until_idle_returns_with_nothing_to_do(store: stead.Store) -> None:
    app = stead.App("t")
    await stead.Worker(app, store).run_until_idle()
    assert await stead.Client(store, app).list_runs() == []


async def test_list_and_get(store: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run, x: int) -> int:
        return x * 2

    client = stead.Client(store, app)
    a = await client.start(wf, 1)
    await stead.Worker(app, store).run_until_idle()
    b = await client.start("wf", x=2)
    done = await client.list_runs(status="completed")
    assert [r.run_id for r in done] == [a.run_id]
    assert [r.run_id for r in await client.list_runs(status="pending")] == [b.run_id]
    assert (await client.get(a.run_id)).result == 2


async def test_an_idle_worker_wakes_on_a_commit_long_before_its_next_poll(
    db_url: str,
) -> None:
    """Started runs are taken at once by a worker idle 60 s from its next poll:
    on PostgreSQL it LISTENs; on SQLite it watches the file's data version,
    which every commit changes, from another process or from this one."""
    app = stead.App("t")

    @app.workflow()
    async def hello(run: stead.Run, name: str) -> str:
        return f"hello {name}"

    worker_store = await stead.open_store(db_url)
    other_store = await stead.open_store(db_url)  # as another process would
    worker = stead.Worker(app, worker_store, stead.WorkerOptions(poll_interval=60))
    task = asyncio.create_task(worker.run())
    try:
        for i, store in enumerate([other_store, worker_store, other_store]):
            await asyncio.sleep(0.2)  # idle, 60 s from its next poll
            client = stead.Client(store, app)
            info = await client.start(hello, f"n{i}")
            assert await client.result(info.run_id, timeout=10, poll=0.005) == f"hello n{i}"
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
        await worker_store.close()
        await other_store.close()


async def test_the_worker_log_shows_a_suspended_runs_wake_up_in_iso(
    store: stead.Store, caplog: pytest.LogCaptureFixture,
) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        await run.sleep(3600)

    info = await stead.Client(store, app).start(wf)
    with caplog.at_level(logging.INFO, logger="stead"):
        await stead.Worker(app, store).run_until_idle()
    [line] = [r.getMessage() for r in caplog.records if "suspended until" in r.getMessage()]
    at = line.split("until ", 1)[1].split(" or ", 1)[0]
    assert info.run_id in line and dt.datetime.fromisoformat(at).tzinfo == dt.UTC


async def test_a_run_ending_while_the_worker_claims_frees_its_slot_at_once(
        store: stead.Store) -> None:
    """A run that ends while the worker claims (its slot counted busy) wakes
    the worker as soon as the claim is over: a run started meanwhile is
    claimed then, not at the next poll, even when the store brings no news."""
    app = stead.App("t")
    gate = asyncio.Event()

    @app.workflow()
    async def held(run: stead.Run) -> str:
        await gate.wait()
        return "held"

    @app.workflow()
    async def quick(run: stead.Run, name: str) -> str:
        return name

    client = stead.Client(store, app)
    first = await client.start(held)
    ends = await client.start(quick, "ends")

    class Orchestrated(DelegatingStore):
        """Claims as the store does; the claim after `ends` is done lets
        `first` end and starts `later`, both before it returns. Waits for
        work are polls: no news of work from the store."""

        later: str | None = None

        async def claim(self, *args: Any, **kwargs: Any) -> list[RunRow]:
            taken = await self.inner.claim(*args, **kwargs)
            if self.later is None and (await self.inner.get_run(ends.run_id)).status == "completed":
                gate.set()
                await _wait_for(lambda: _ended(self.inner, first.run_id), 30.0)
                await asyncio.sleep(0.05)  # the worker's own bookkeeping of the end
                self.later = (await client.start(quick, "later")).run_id
            return taken

        async def wait_for_work(self, timeout: float, *,
                                ring: Callable[[], None] | None = None,
                                since: object = None) -> None:
            await asyncio.sleep(timeout)

    wrapped = Orchestrated(store)
    worker = stead.Worker(app, wrapped, stead.WorkerOptions(concurrency=2, poll_interval=60.0))
    working = asyncio.create_task(worker.run())
    try:
        await _wait_for(lambda: _later_ended(wrapped), 30.0)
    finally:
        worker.stop()
        await working


async def test_run_until_idle_claims_again_after_a_run_ends_during_its_last_claim(
        store: stead.Store) -> None:
    """A run that ends while the worker's claim finds nothing (its tenant at
    its limit) frees the tenant's next run: working until idle, the worker
    claims again rather than stop beside it."""
    app = stead.App("t")
    app.tenant("capped", concurrency=1)
    gate = asyncio.Event()

    @app.workflow()
    async def held(run: stead.Run) -> str:
        await gate.wait()
        return "held"

    @app.workflow()
    async def quick(run: stead.Run) -> str:
        return "quick"

    client = stead.Client(store, app)
    first = await client.start(held, tenant="capped")
    second = await client.start(quick, tenant="capped")
    other = await client.start(quick, tenant="other")

    class EndsDuringClaim(DelegatingStore):
        """The claim that finds nothing once `other` is done (`first` holds
        its tenant's one slot) lets `first` end before it returns."""

        async def _then(self, taken: list[RunRow]) -> list[RunRow]:
            if not taken and not gate.is_set() and await _ended(self.inner, other.run_id):
                gate.set()
                await _wait_for(lambda: _ended(self.inner, first.run_id), 30.0)
                await asyncio.sleep(0.05)  # the worker's own bookkeeping of the end
            return taken

        async def claim_fair(self, *args: Any, **kwargs: Any) -> list[RunRow]:
            return await self._then(await self.inner.claim_fair(*args, **kwargs))

        async def claim(self, *args: Any, **kwargs: Any) -> list[RunRow]:
            return await self._then(await self.inner.claim(*args, **kwargs))

    wrapped = EndsDuringClaim(store)
    await asyncio.wait_for(stead.Worker(app, wrapped).run_until_idle(), 60)
    assert gate.is_set()
    assert (await store.get_run(second.run_id)).status == "completed"


async def _ended(store: stead.Store, run_id: str) -> bool:
    return (await store.get_run(run_id)).status == "completed"


async def _later_ended(store: Any) -> bool:
    return store.later is not None and await _ended(store.inner, store.later)
