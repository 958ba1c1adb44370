"""A delivery made in the process of an idle worker that hosts the woken
run's code leases the run to that worker in the delivery's transaction and
hands it the row (`store/local_work.py`): the worker starts at once, with no
claim of its own. Everything else about the run is as after a claim: one
epoch more, a lease the worker renews, a takeover by someone else if it
stops."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import stead
from stead.store.base import Store
from stead.store.seam import UnsharedClaim


def approval_app(after: Any = None) -> tuple[stead.App, stead.Workflow[..., Any]]:
    app = stead.App("handoff")

    def note(x: Any) -> Any:
        if after is not None:
            after(x)
        return x

    @app.workflow()
    async def approve(run: stead.Run) -> Any:
        event = await (await run.wait("approval", token=False))
        return await run.step("after", note, event)

    return app, approve


class CountedClaims:
    """The runs each `Store.claim`, `claim_unshared` and `claim_queue` of one
    store took."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.taken: list[str] = []
        for name in ("claim", "claim_unshared", "claim_queue"):
            direct = getattr(store, name)

            async def counted(*args: Any, _direct: Any = direct, **kwargs: Any) -> Any:
                got = await _direct(*args, **kwargs)
                rows = got.runs if isinstance(got, UnsharedClaim) else got
                self.taken += [r.run_id for r in rows]
                return got

            monkeypatch.setattr(store, name, counted)


async def _waiting(client: stead.Client, run_id: str) -> None:
    await client.wait_for(run_id, ["waiting"], timeout=30)


async def _listening(store: Store) -> None:
    """Until the store listens for news of work. PostgreSQL's listener starts
    with the first wait and then says once that work may have come while
    nobody listened: a worker whose first wait met that would claim instead of
    offering its slots to the test's next delivery."""
    from stead.store.postgres import PostgresStore

    if isinstance(store, PostgresStore):
        await store.wait_for_work(30)


async def _offering(store: Store) -> None:
    """Until an idle worker of this process offers deliveries a free slot: a
    worker's start (its lease keeper's first look, its first claim), or its
    return to idle after a run, may outlast a fixed pause on a loaded machine."""
    local = store.database.local
    assert local is not None
    for _ in range(3000):
        if any(taker.open > 0 for taker in local._takers):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no idle worker offered its slots within 30 s")


async def test_a_delivery_hands_the_woken_run_to_an_idle_worker_of_its_process(
        store: stead.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    done = asyncio.Event()
    app, approve = approval_app(lambda _: done.set())
    client = stead.Client(store, app)
    claims = CountedClaims(store, monkeypatch)
    await _listening(store)
    worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=60))
    task = asyncio.create_task(worker.run())
    try:
        info = await client.start(approve)
        await _waiting(client, info.run_id)
        assert claims.taken == [info.run_id]  # its first claim: a start hands nothing
        epoch = (await client.get(info.run_id)).epoch
        await _offering(store)  # idle again
        accepted = await client.deliver(info.run_id, event_id="e1", kind="approval",
                                        payload={"ok": 1})
        assert isinstance(accepted, stead.Accepted)
        await asyncio.wait_for(done.wait(), 20)
        assert await client.result(info.run_id, timeout=20) == {"ok": 1}
        assert claims.taken == [info.run_id]  # the woken run came with the delivery
        assert (await store.get_run(info.run_id)).epoch == epoch + 1
    finally:
        worker.stop()
        await task


async def test_a_run_of_code_the_idle_worker_does_not_host_is_woken_for_a_claim(
        db_url: str) -> None:
    app, approve = approval_app()
    other = stead.App("handoff")  # hosts another workflow only

    @other.workflow()
    async def unrelated(run: stead.Run) -> int:
        return 1

    store = await stead.open_store(db_url)
    try:
        client = stead.Client(store, app)
        info = await client.start(approve)
        await stead.Worker(app, store).run_until_idle()
        idle = stead.Worker(other, store, stead.WorkerOptions(poll_interval=60))
        task = asyncio.create_task(idle.run())
        await _offering(store)
        await client.deliver(info.run_id, event_id="e1", kind="approval", payload=1)
        idle.stop()
        await task
        row = await store.get_run(info.run_id)
        assert row.status == "running" and row.lease_owner is None
        await stead.Worker(app, store).run_until_idle()
        assert await client.result(info.run_id) == 1
    finally:
        await store.close()


async def test_a_queued_run_is_left_to_its_queue_s_claim(
        store: stead.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    app = stead.App("handoff")
    app.queue("q", concurrency=1)

    @app.workflow()
    async def approve(run: stead.Run) -> Any:
        return await (await run.wait("approval", token=False))

    client = stead.Client(store, app)
    claims = CountedClaims(store, monkeypatch)
    await _listening(store)
    worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=60))
    task = asyncio.create_task(worker.run())
    try:
        info = await client.start(approve, queue="q")
        await _waiting(client, info.run_id)
        await _offering(store)
        await client.deliver(info.run_id, event_id="e1", kind="approval", payload=2)
        assert await client.result(info.run_id, timeout=20) == 2
        # Taken by the queue's claim, under its limits, both times.
        assert claims.taken == [info.run_id, info.run_id]
    finally:
        worker.stop()
        await task


async def test_a_run_handed_to_a_stopping_worker_is_released_for_another(
        store: stead.Store) -> None:
    app, approve = approval_app()
    client = stead.Client(store, app)
    info = await client.start(approve)
    await stead.Worker(app, store).run_until_idle()
    await _listening(store)
    worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=60))
    task = asyncio.create_task(worker.run())
    await _offering(store)
    local = store.database.local
    assert local is not None
    # The delivery reserves the idle worker's slot; the worker is told to
    # stop before the leased row reaches it.
    real_reserve = local.reserve

    def reserve_then_stop(code: str) -> Any:
        taker = real_reserve(code)
        worker.stop()
        return taker

    local.reserve = reserve_then_stop  # type: ignore[method-assign]
    try:
        await client.deliver(info.run_id, event_id="e1", kind="approval", payload=3)
    finally:
        local.reserve = real_reserve  # type: ignore[method-assign]
    await task
    for _ in range(200):  # the release is a task the handing-over started
        row = await store.get_run(info.run_id)
        if row.lease_owner is None:
            break
        await asyncio.sleep(0.05)
    assert row.lease_owner is None and row.status == "running"
    await stead.Worker(app, store).run_until_idle()  # no lease to wait out
    assert await client.result(info.run_id) == 3


async def test_a_slot_a_delivery_did_not_use_is_given_back(
        store: stead.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    app, approve = approval_app()
    client = stead.Client(store, app)
    first, second = (await client.start(approve)), (await client.start(approve))
    await stead.Worker(app, store).run_until_idle()
    claims = CountedClaims(store, monkeypatch)
    await _listening(store)
    # One slot: a delivery that leased nothing must give it back, or the
    # next one could not hand its run over.
    worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=60, concurrency=1))
    task = asyncio.create_task(worker.run())
    try:
        await _offering(store)
        wrong = await client.deliver(first.run_id, event_id="x", kind="nope", payload=0)
        assert isinstance(wrong, stead.Rejected)
        await client.deliver(first.run_id, event_id="e1", kind="approval", payload=4)
        assert await client.result(first.run_id, timeout=20) == 4
        again = await client.deliver(first.run_id, event_id="e1", kind="approval", payload=4)
        assert isinstance(again, stead.Duplicate)
        await _offering(store)  # idle again after the first run
        await client.deliver(second.run_id, event_id="e2", kind="approval", payload=5)
        assert await client.result(second.run_id, timeout=20) == 5
        assert claims.taken == []  # both came with their deliveries
    finally:
        worker.stop()
        await task


async def test_a_run_handed_over_wakes_no_other_process_s_idle_workers(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Told of a run leased already, every idle worker of the fleet would claim
    only to find nothing: a delivery that hands its run over sends no NOTIFY;
    one that hands nothing over does. `watcher` listens as another process's
    idle worker would."""
    app, approve = approval_app()
    store, watcher = await stead.open_store(pg_url), await stead.open_store(pg_url)
    try:
        client = stead.Client(store, app)
        handed, left = (await client.start(approve)), (await client.start(approve))
        await stead.Worker(app, store).run_until_idle()
        claims = CountedClaims(store, monkeypatch)
        await _listening(store)
        await _listening(watcher)
        worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=60))
        task = asyncio.create_task(worker.run())
        try:
            await _offering(store)
            await client.deliver(handed.run_id, event_id="e1", kind="approval", payload=1)
            started = time.monotonic()
            await watcher.wait_for_work(0.5)
            assert time.monotonic() - started >= 0.45, "a handed-over run woke the fleet"
            assert await client.result(handed.run_id, timeout=20) == 1
            assert claims.taken == []
        finally:
            worker.stop()
            await task
        waiting = asyncio.create_task(watcher.wait_for_work(30))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        await client.deliver(left.run_id, event_id="e2", kind="approval", payload=2)
        await asyncio.wait_for(waiting, 10)  # no idle worker here: the fleet is told
        assert time.monotonic() - started < 5
    finally:
        await store.close()
        await watcher.close()
