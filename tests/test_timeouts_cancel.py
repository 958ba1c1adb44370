"""Timeouts and cancellation, on both stores: a step's timeout, a run's
deadline, and a cancel that reaches a running run at its next call boundary
without abandoning an effect in flight (its outcome is followed, also by the
worker that takes over from a dead one)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

import stead
from stead.records import Fence, NewRun
from stead.testing import CrashingStore, CrashPoint
from tests.helpers import Calls, Crash


def _crash() -> None:
    raise Crash()


async def test_a_step_that_takes_too_long_fails_with_a_timeout(store: stead.Store) -> None:
    app = stead.App("t")

    async def slow() -> str:
        await asyncio.sleep(30)
        return "late"

    def slow_sync() -> str:
        time.sleep(0.5)
        return "late"

    @app.workflow()
    async def wf(run: stead.Run) -> list[str]:
        seen = []
        for name, fn in (("async", slow), ("sync", slow_sync)):
            try:
                await run.step(name, fn, timeout=0.05)
            except stead.StepTimeout as exc:  # a StepError of its own type
                assert isinstance(exc, stead.StepError) and exc.error_type == "TimeoutError"
                seen.append(f"{exc}")
        seen.append(await run.step("quick", lambda: "on time", timeout=5))
        return seen

    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store).run_until_idle()
    result = await client.result(info.run_id, timeout=5)
    assert len(result) == 3 and result[2] == "on time"
    assert all("TimeoutError" in r for r in result[:2]), result
    errors = [json.loads(r.payload)["type"] for r in await client.journal(info.run_id)
              if r.status == "error"]
    assert errors == ["TimeoutError", "TimeoutError"]


async def test_a_step_with_a_timeout_always_runs_where_the_timeout_can_leave_it(
        store: stead.Store) -> None:
    # A quick sync step may run on the worker's loop (no hand-off to a
    # thread); one with a timeout never does, or nothing could cut it short.
    app = stead.App("t")
    loop_thread = threading.current_thread().name

    def where() -> str:
        return threading.current_thread().name

    @app.workflow()
    async def wf(run: stead.Run) -> dict[str, list[str]]:
        timed = [await run.step(f"t{i}", where, timeout=5) for i in range(12)]
        plain = [await run.step(f"p{i}", where) for i in range(12)]
        return {"timed": timed, "plain": plain}

    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store).run_until_idle()
    result = await client.result(info.run_id, timeout=10)
    assert loop_thread not in result["timed"]
    assert len(result["plain"]) == 12  # inline or not: the same result


async def test_a_step_timeout_must_be_positive(store: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        return await run.step("x", lambda: "x", timeout=0)

    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store).run_until_idle()
    with pytest.raises(stead.RunFailed, match="positive"):
        await client.result(info.run_id, timeout=5)


@pytest.mark.parametrize("deadline", [0.3, 1.6])  # slept through in process; suspended
async def test_a_run_past_its_deadline_fails_at_its_next_boundary(
    store: stead.Store, deadline: float,
) -> None:
    app = stead.App("t")
    calls = Calls()

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        await run.step("before", lambda: calls.hit("before"))
        await run.sleep(60)
        await run.step("after", lambda: calls.hit("after"))
        return "done"

    client = stead.Client(store, app)
    info = await client.start(wf, deadline=deadline)
    assert info.deadline is not None
    assert await stead.Worker(app, store).run_until_done([info.run_id], timeout=20)
    row = await client.get(info.run_id)
    assert row.status == "failed" and row.error is not None
    assert row.error["type"] == "DeadlineExceeded"
    with pytest.raises(stead.DeadlineExceeded, match="passed its deadline") as raised:
        await client.result(info.run_id, timeout=5)
    assert isinstance(raised.value, stead.RunFailed) and raised.value.status == "failed"
    assert calls == {"before": 1}
    assert row.updated_at - row.created_at < deadline + 5.5


async def test_a_deadline_must_be_positive(store: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        return None

    with pytest.raises(stead.InvalidInput, match="deadline"):
        await stead.Client(store, app).start(wf, deadline=-1)


async def test_cancel_waits_for_the_effect_in_flight_then_stops(store: stead.Store) -> None:
    app = stead.App("t")
    sent: list[str] = []
    started, release = asyncio.Event(), asyncio.Event()

    async def charge(op: stead.Operation, amount: int) -> dict[str, Any]:
        started.set()
        await release.wait()
        sent.append(f"charge {amount}")
        return {"charged": amount}

    async def notify(op: stead.Operation) -> str:
        sent.append("notify")
        return "sent"

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        await asyncio.gather(run.effect("charge", charge, 42),
                             run.step("idle", asyncio.sleep, 0.01))
        await run.effect("notify", notify)
        return "done"

    client = stead.Client(store, app)
    info = await client.start(wf)
    worker = stead.Worker(app, store)
    task = asyncio.create_task(worker.run_until_idle())
    await started.wait()
    asked = await client.cancel(info.run_id)
    assert asked.cancel_requested and asked.status == "running"
    await asyncio.sleep(1.5)  # the worker hears of it within a second; the effect still runs
    release.set()
    await task
    assert sent == ["charge 42"]  # the effect's outcome came; nothing after it was sent
    row = await client.get(info.run_id)
    assert row.status == "cancelled" and row.error is not None
    assert row.error["type"] == "Cancelled"
    charge_records = [r.status for r in await client.journal(info.run_id)
                      if r.name == "charge"]
    assert charge_records == ["intent", "ok"]


@pytest.mark.parametrize("lease_ended", [False, True])
async def test_a_takeover_of_a_cancelled_run_follows_the_effect_first(
    store: stead.Store, lease_ended: bool,
) -> None:
    """The worker died with the effect's intent journaled and no outcome; the
    run is cancelled meanwhile. The worker that takes it over asks the
    effect's check, journals the outcome, then ends the run as cancelled."""
    app = stead.App("t")
    sent: list[str] = []
    checked: list[str] = []

    def charge(op: stead.Operation) -> str:
        sent.append(op.key)
        return "charged"

    def find(op: stead.Operation) -> stead.Outcome:
        checked.append(op.key)
        return stead.Outcome.done("charged")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        await run.effect("charge", charge, check=find)
        await run.step("after", lambda: sent.append("after"))
        return "done"

    client = stead.Client(store, app)
    info = await client.start(wf)
    dying = CrashingStore(store, CrashPoint(after_commit=1, name="charge"), crash=_crash)
    first = stead.Worker(app, dying, stead.WorkerOptions(lease_seconds=0.5))
    await first.run_until_idle()  # its execution dies once the intent is durable
    assert sent == []
    if lease_ended:
        await asyncio.sleep(0.6)
    asked = await client.cancel(info.run_id)
    assert (asked.status, asked.cancel_requested) == ("running", True)
    await asyncio.sleep(0.6)
    await stead.Worker(app, store, stead.WorkerOptions(lease_seconds=0.5)).run_until_idle()
    assert checked and sent == []
    assert [r.status for r in await client.journal(info.run_id) if r.name == "charge"] == [
        "intent", "ok"]
    assert (await client.get(info.run_id)).status == "cancelled"


async def test_cancel_of_a_run_no_worker_holds_is_at_once(store: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> int:
        return 1

    client = stead.Client(store, app)
    done = await client.start(wf)
    await stead.Worker(app, store).run_until_done([done.run_id])
    pending = await client.start(wf)
    cancelled = await client.cancel(pending.run_id)
    assert (cancelled.status, cancelled.cancel_requested) == ("cancelled", False)
    assert (await client.cancel(pending.run_id)).status == "cancelled"  # twice is once
    assert (await client.cancel(done.run_id)).status == "completed"
    with pytest.raises(stead.UnknownRun):
        await client.cancel("nope")


async def test_a_run_asked_to_cancel_does_not_suspend(store: stead.Store) -> None:
    await store.create_run(NewRun("r1", "wf", 1, None, '{"args":[],"kwargs":{}}'))
    [row] = await store.claim("w1", ["wf@1"], 30.0, 1)
    fence = Fence("r1", row.epoch, "w1")
    asked = await store.request_cancel("r1")
    assert asked.status == "running" and asked.cancel_requested is not None
    assert await store.cancel_requests(["r1", "r2"]) == ["r1"]
    with pytest.raises(stead.SteadError, match="cancel was requested"):
        await store.suspend(fence, [], None, None, [])
    assert (await store.get_run("r1")).status == "running"
