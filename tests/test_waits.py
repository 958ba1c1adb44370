"""Waits, events and the resume contract; durable timers; task state."""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import pydantic
import pytest

import stead
from tests import stress
from tests.helpers import Calls


class Confirmation(pydantic.BaseModel):
    approved: bool
    note: str = ""


def refund_app(calls: Calls) -> tuple[stead.App, stead.Workflow[..., Any]]:
    app = stead.App("shop")

    def dispatch(op: stead.Operation, order: str, amount: int) -> dict[str, Any]:
        calls.hit("refund")
        return {"refund": f"rf-{order}", "amount": amount, "key": op.key}

    @app.workflow()
    async def refund(run: stead.Run, order: str, amount: int) -> dict[str, Any]:
        facts = await run.state.update({"status": "awaiting_user_confirmation"},
                                       expect_version=0)
        w = await run.wait("user_confirmation", schema=Confirmation,
                           bind={"order_id": order, "amount": amount,
                                 "state_version": facts.version},
                           expires_in=dt.timedelta(hours=48))
        await run.step("send_link", lambda wait_id, token: calls.hit("link"), w.wait_id,
                       w.token)
        answer = await w
        if not answer.approved:
            await run.state.update({"status": "declined"}, expect_version=facts.version)
            return {"declined": True}
        receipt = await run.effect("dispatch_refund", dispatch, order, amount)
        await run.state.update({"status": "refunded", "refund_dispatched": True},
                               expect_version=facts.version)
        return receipt

    return app, refund


async def _opened(client: stead.Client, run_id: str) -> stead.records.WaitRow:
    [wait] = await client.waits(run_id=run_id)
    return wait


async def _token(store: stead.Store, run_id: str, wait_id: str) -> str:
    """The wait's token, signed as the worker signed it: with the key in force
    (a key file or STEAD_SECRET, never the database)."""
    from stead.workflow.waits import sign

    return sign((await store.keyring()).current, run_id, wait_id)


async def test_a_run_waits_without_a_worker_and_wakes_on_the_event(
    fstore: stead.Store,
) -> None:
    calls = Calls()
    app, refund = refund_app(calls)
    client = stead.Client(fstore, app)
    info = await client.start(refund, "123", 4200, task_id="order-123")
    worker = stead.Worker(app, fstore)
    await worker.run_until_idle()
    row = await client.get(info.run_id)
    assert row.status == "waiting" and row.lease_owner is None  # holds no worker
    wait = await _opened(client, info.run_id)
    assert wait.kind == "user_confirmation" and wait.state == "open"
    facts = await client.task_state("order-123")
    assert facts.version == 1 and facts["status"] == "awaiting_user_confirmation"
    token = await _token(fstore, info.run_id, wait.wait_id)

    bind = {"order_id": "123", "amount": 4200, "state_version": 1}
    verdict = await client.deliver(info.run_id, wait_id=wait.wait_id, event_id="evt-1",
                                   payload={"approved": True}, bind=bind, token=token)
    assert verdict == stead.Accepted("evt-1", wait.wait_id)
    again = await client.deliver(info.run_id, wait_id=wait.wait_id, event_id="evt-1",
                                 payload={"approved": True}, bind=bind, token=token)
    assert isinstance(again, stead.Duplicate)
    assert (again.wait_id, again.original_event_id) == (wait.wait_id, "evt-1")
    await stead.Worker(app, fstore).run_until_idle()
    result = await client.result(info.run_id, timeout=10)
    assert result["refund"] == "rf-123"
    assert calls == {"link": 1, "refund": 1}
    assert (await client.task_state("order-123"))["refund_dispatched"] is True
    events = await client.events(info.run_id)
    assert [(e.event_id, e.verdict) for e in events] == [("evt-1", "accepted")]


async def test_a_run_woken_by_a_delivery_reads_its_wait_with_the_takeover(
    store: stead.Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wait an event consumed last and that event are read with the
    takeover's journal: the woken run replays them without asking the store
    for them again; a wait still open (the next one) is asked for."""
    app = stead.App("two_waits")

    @app.workflow()
    async def twice(run: stead.Run) -> list[str]:
        first = await (await run.wait("first", token=False))
        await run.step("between", lambda: 1)
        second = await (await run.wait("second", token=False))
        return [first["say"], second["say"]]

    asked: list[str] = []
    real = store.wait_and_event

    async def noted(wait_id: str, **kwargs: Any) -> Any:
        asked.append(wait_id)
        return await real(wait_id, **kwargs)

    monkeypatch.setattr(store, "wait_and_event", noted)
    client = stead.Client(store, app)
    info = await client.start(twice)
    await stead.Worker(app, store).run_until_idle()
    [first] = await client.waits(run_id=info.run_id)
    assert asked == [first.wait_id]  # open: asked for, then the run suspends
    await client.deliver(info.run_id, wait_id=first.wait_id, event_id="e1",
                         payload={"say": "one"})
    asked.clear()
    await stead.Worker(app, store).run_until_idle()
    second = next(w for w in await client.waits(run_id=info.run_id) if w.kind == "second")
    assert asked == [second.wait_id]  # the first came with the takeover
    await client.deliver(info.run_id, wait_id=second.wait_id, event_id="e2",
                         payload={"say": "two"})
    asked.clear()
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == ["one", "two"]
    assert asked == []  # the first replays from the journal, the second came along


async def test_the_token_never_enters_the_database(
    fstore: stead.Store, tmp_path: Path, db_url: str
) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("scans the SQLite file")
    calls = Calls()
    app, refund = refund_app(calls)
    client = stead.Client(fstore, app)
    info = await client.start(refund, "123", 4200)
    await stead.Worker(app, fstore).run_until_idle()
    wait = await _opened(client, info.run_id)
    token = await _token(fstore, info.run_id, wait.wait_id)
    conn = sqlite3.connect(tmp_path / "stead.db")
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"):
        for row in conn.execute(f"SELECT * FROM {table}"):
            assert token not in repr(row), table
    conn.close()


@pytest.fixture
async def waiting(fstore: stead.Store) -> tuple[stead.Client, str, Any, str]:
    calls = Calls()
    app, refund = refund_app(calls)
    client = stead.Client(fstore, app)
    info = await client.start(refund, "123", 4200, task_id="order-123")
    await stead.Worker(app, fstore).run_until_idle()
    wait = await _opened(client, info.run_id)
    return client, info.run_id, wait, await _token(fstore, info.run_id, wait.wait_id)


GOOD_BIND = {"order_id": "123", "amount": 4200, "state_version": 1}


@pytest.mark.parametrize(
    ("change", "reason", "detail"),
    [
        ({"run_id": "nope"}, "unknown_run", ""),
        ({"kind": "payment_webhook", "wait_id": None}, "wrong_event_type", "user_confirmation"),
        ({"wait_id": "w-other"}, "wrong_wait", "w-other"),
        ({"bind": {**GOOD_BIND, "amount": 9999}}, "bound_value_mismatch", "amount"),
        ({"bind": {**GOOD_BIND, "amount": "4200"}}, "bound_value_mismatch", "amount"),
        ({"bind": {"order_id": "123", "amount": 4200}}, "bound_value_mismatch", "state_version"),
        ({"bind": {**GOOD_BIND, "extra": 1}}, "bound_value_mismatch", "extra"),
        ({"token": "stk_forged"}, "bad_token", ""),
        ({"token": None}, "bad_token", ""),
        ({"payload": {"approved": "yes"}}, "invalid_payload", "approved"),
        ({"payload": {"note": "no decision"}}, "invalid_payload", "approved"),
    ],
)
async def test_each_rejection_reason(
    waiting: tuple[stead.Client, str, Any, str], change: dict[str, Any], reason: str,
    detail: str,
) -> None:
    client, run_id, wait, token = waiting
    event: dict[str, Any] = {"run_id": run_id, "wait_id": wait.wait_id, "kind": None,
                             "payload": {"approved": True}, "bind": GOOD_BIND,
                             "token": token, **change}
    verdict = await client.deliver(event.pop("run_id"), event_id="e1", **event)
    assert isinstance(verdict, stead.Rejected), verdict
    assert verdict.reason == reason and detail in verdict.detail
    stored = await client.events(run_id if reason != "unknown_run" else "nope")
    assert [(e.event_id, e.verdict, e.reason) for e in stored] == [("e1", "rejected", reason)]
    assert (await _opened(client, run_id)).state == "open"  # the wait is untouched


async def test_not_waiting_consumed_revoked_expired_and_state_moved(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        facts = await run.state.update({"n": 1}, expect_version=0)
        w = await run.wait("ok", bind={"state_version": facts.version}, token=False,
                           expires_in=60)
        try:
            await w
        except stead.WaitExpired:
            return "expired"
        return "ok"

    client = stead.Client(fstore, app)
    idle = await client.start(wf)  # not yet run: no wait
    verdict = await client.deliver(idle.run_id, kind="ok", event_id="e0")
    assert isinstance(verdict, stead.Rejected) and verdict.reason == "not_waiting"

    await stead.Worker(app, fstore).run_until_idle()
    [wait] = await client.waits(run_id=idle.run_id)
    ok = {"state_version": 1}
    assert isinstance(await client.deliver(idle.run_id, kind="ok", event_id="e1", bind=ok),
                      stead.Accepted)
    late = await client.deliver(idle.run_id, kind="ok", event_id="e2", bind=ok)
    assert isinstance(late, stead.Rejected) and late.reason == "already_consumed"
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(idle.run_id) == "ok"

    # revoked
    second = await client.start(wf, task_id="t2")
    await stead.Worker(app, fstore).run_until_idle()
    [wait] = await client.waits(run_id=second.run_id)
    await client.revoke_wait(wait.wait_id)
    revoked = await client.deliver(second.run_id, wait_id=wait.wait_id, event_id="e1", bind=ok)
    assert isinstance(revoked, stead.Rejected) and revoked.reason == "revoked"
    await stead.Worker(app, fstore).run_until_idle()
    got = await client.get(second.run_id)
    assert got.status == "failed" and got.error is not None
    assert got.error["type"] == "WaitRevoked"

    # expired, and the run wakes at the expiry to handle it
    third = await client.start(wf, task_id="t3")
    await stead.Worker(app, fstore).run_until_idle()
    clock.advance(61)
    expired = await client.deliver(third.run_id, kind="ok", event_id="e1", bind=ok)
    assert isinstance(expired, stead.Rejected) and expired.reason == "expired"
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(third.run_id) == "expired"

    # the state moved after the wait was bound to it
    moving = stead.App("m")

    @moving.workflow()
    async def mover(run: stead.Run) -> str:
        facts = await run.state.update({"n": 1}, expect_version=0)
        w = await run.wait("ok", bind={"state_version": facts.version}, token=False)
        await run.state.update({"n": 2}, expect_version=facts.version)  # moved on
        await w
        return "woken"

    fourth = await stead.Client(fstore, moving).start(mover)
    await stead.Worker(moving, fstore).run_until_idle()
    moved = await client.deliver(fourth.run_id, kind="ok", event_id="e1", bind=ok)
    assert isinstance(moved, stead.Rejected) and moved.reason == "state_version_moved"
    assert moved.detail == "bound 1, now 2"


async def test_a_token_passed_to_an_effect_is_journaled_as_a_reference(
    fstore: stead.Store,
) -> None:
    app = stead.App("t")
    sent: list[str] = []

    def send_link(op: stead.Operation, token: stead.Token) -> None:
        sent.append(token.reveal())

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        w = await run.wait("confirm")
        await run.effect("send_link", send_link, w.token)

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    assert len(sent) == 1 and sent[0].startswith("stk1.")
    journal = await client.journal(info.run_id)
    intent = next(r for r in journal if r.status == "intent")
    assert sent[0] not in intent.payload and "<token of wait" in intent.payload


async def test_a_durable_sleep_taken_over_sleeps_only_the_remainder(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")
    after = Calls()

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        await run.sleep(dt.timedelta(hours=1))
        await run.step("after", lambda: after.hit("after"))
        return "awake"

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    row = await client.get(info.run_id)
    assert row.status == "waiting" and row.lease_owner is None
    clock.advance(1800)
    await stead.Worker(app, fstore).run_until_idle()  # not due: nothing claimed
    assert (await client.get(info.run_id)).status == "waiting" and after["after"] == 0
    clock.advance(1801)
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "awake"
    assert after["after"] == 1


async def test_a_short_sleep_stays_in_the_process(fstore: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        await run.sleep(0.05)
        return "done"

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "done"


async def test_state_conflicts_are_journaled_and_replayed(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")
    seen: list[str] = []

    @app.workflow()
    async def wf(run: stead.Run) -> int:
        first = await run.state.update({"a": {"b": 1, "c": 2}}, expect_version=0)
        try:
            await run.state.update({"a": None}, expect_version=0)
        except stead.StateConflict as exc:
            seen.append(f"conflict {exc.expected}->{exc.actual}")
        second = await run.state.update({"a": {"c": None, "d": 3}},
                                        expect_version=first.version)
        assert second.data == {"a": {"b": 1, "d": 3}}
        w = await run.wait("go", token=False)
        await w
        return (await run.state.get()).version

    client = stead.Client(fstore, app)
    info = await client.start(wf, task_id="T")
    await stead.Worker(app, fstore).run_until_idle()
    assert isinstance(await client.deliver(info.run_id, kind="go", event_id="1"),
                      stead.Accepted)
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id) == 2
    assert seen == ["conflict 0->1", "conflict 0->1"]  # live, then replayed identically
    facts = await client.task_state("T")
    assert facts.version == 2 and facts.data == {"a": {"b": 1, "d": 3}}


async def test_a_wait_in_a_gather_with_a_step_in_flight(fstore: stead.Store) -> None:
    """The run may suspend only when no branch has live work in flight."""
    app = stead.App("t")
    gate = asyncio.Event()

    async def slow() -> str:
        await gate.wait()
        return "slow done"

    @app.workflow()
    async def wf(run: stead.Run) -> list[Any]:
        w = await run.wait("go", token=False)
        got = await asyncio.gather(run.step("slow", slow), w)
        return list(got)

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    worker = stead.Worker(app, fstore)
    task = asyncio.create_task(worker.run_until_idle())
    for _ in range(100):
        await asyncio.sleep(0.01)
    assert (await client.get(info.run_id)).status == "running"  # the step holds it
    gate.set()
    await asyncio.wait_for(task, 10)
    assert (await client.get(info.run_id)).status == "waiting"
    await client.deliver(info.run_id, kind="go", event_id="1", payload={"x": 1})
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id) == ["slow done", {"x": 1}]


async def test_concurrent_deliveries_accept_exactly_one(fstore: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> Any:
        return await (await run.wait("go", token=False))

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    same = await asyncio.gather(*(
        client.deliver(info.run_id, kind="go", event_id="same", payload=i) for i in range(8)))
    assert sum(isinstance(v, stead.Accepted) for v in same) == 1
    assert sum(isinstance(v, stead.Duplicate) for v in same) == 7
    distinct = await asyncio.gather(*(
        client.deliver(info.run_id, kind="go", event_id=f"e{i}", payload=i) for i in range(8)))
    assert all(isinstance(v, stead.Rejected) and v.reason == "already_consumed"
               for v in distinct)
    assert len(await client.events(info.run_id)) == 9  # every delivery is stored


async def test_many_waiting_runs_hold_no_worker(fstore: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run, i: int) -> Any:
        return await (await run.wait("go", bind={"i": i}, token=False))

    client = stead.Client(fstore, app)
    ids = [(await client.start(wf, i)).run_id for i in range(200)]
    worker = stead.Worker(app, fstore, stead.WorkerOptions(concurrency=50))
    before = {t.get_name() for t in asyncio.all_tasks()}
    await worker.run_until_idle()
    # No task is left per waiting run; the store's own LISTEN session (PostgreSQL)
    # may have started with the worker's first wait for work, and stays the store's.
    assert {t.get_name() for t in asyncio.all_tasks()} - before <= {"stead-listen"}
    assert {(await client.get(i)).status for i in ids} == {"waiting"}
    assert len(await client.waits(limit=1000)) == 200
    for i, run_id in enumerate(ids[:10]):
        await client.deliver(run_id, kind="go", event_id="e", bind={"i": i}, payload=i)
    await worker.run_until_idle()
    assert [await client.result(r) for r in ids[:10]] == list(range(10))


# -- a mutated event is never accepted ------------------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _mutations() -> st.SearchStrategy[tuple[str, Any]]:
    values = st.one_of(st.integers(), st.text(max_size=5), st.booleans(), st.none(),
                       st.floats(allow_nan=False, allow_infinity=False))
    return st.one_of(
        st.tuples(st.just("drop_bind"), st.sampled_from(sorted(GOOD_BIND))),
        st.tuples(st.just("change_bind"), st.tuples(st.sampled_from(sorted(GOOD_BIND)), values)),
        st.tuples(st.just("swap_type"), st.sampled_from(sorted(GOOD_BIND))),
        st.tuples(st.just("flip_token"), st.integers(min_value=0, max_value=40)),
        st.tuples(st.just("wait_id"), st.text(min_size=1, max_size=8)),
        st.tuples(st.just("kind"), st.text(min_size=1, max_size=8)),
        st.tuples(st.just("run_id"), st.text(min_size=1, max_size=8)),
        st.tuples(st.just("payload"), values),
    )


def _mutate(event: dict[str, Any], how: str, arg: Any) -> dict[str, Any]:
    event = {**event, "bind": dict(event["bind"])}
    if how == "drop_bind":
        del event["bind"][arg]
    elif how == "change_bind":
        key, value = arg
        if value == event["bind"][key] and type(value) is type(event["bind"][key]):
            value = [value]
        event["bind"][key] = value
    elif how == "swap_type":
        v = event["bind"][arg]
        event["bind"][arg] = str(v) if not isinstance(v, str) else [v]
    elif how == "flip_token":
        t = event["token"]
        i = arg % len(t)
        event["token"] = t[:i] + ("A" if t[i] != "A" else "B") + t[i + 1:]
    elif how in ("wait_id", "kind", "run_id"):
        if event.get(how) == arg:
            arg = arg + "x"
        event[how] = arg
    elif how == "payload":
        event["payload"] = {"approved": arg} if not isinstance(arg, bool) else arg
    return event


@settings(max_examples=stress.examples(60), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutation=_mutations())
async def test_a_mutated_event_is_never_accepted(
    waiting: tuple[stead.Client, str, Any, str], mutation: tuple[str, Any]
) -> None:
    client, run_id, wait, token = waiting
    good = {"run_id": run_id, "wait_id": wait.wait_id, "kind": "user_confirmation",
            "payload": {"approved": True}, "bind": GOOD_BIND, "token": token}
    event = _mutate(good, *mutation)
    import uuid

    try:
        verdict = await client.deliver(event.pop("run_id"), event_id=uuid.uuid4().hex, **event)
    except stead.InvalidInput:
        return  # refused before it was judged (a NUL in an id): not accepted either
    assert isinstance(verdict, stead.Rejected), (mutation, verdict)


async def test_ending_a_run_closes_its_open_waits(fstore: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> Any:
        return await (await run.wait("go", token=False))

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    assert len(await client.waits(run_id=info.run_id)) == 1
    await client.cancel(info.run_id)
    assert await client.waits(run_id=info.run_id) == []
    [closed] = await client.waits(run_id=info.run_id, state=None)
    assert closed.state == "revoked"
    late = await client.deliver(info.run_id, kind="go", event_id="e")
    assert isinstance(late, stead.Rejected) and late.reason == "not_waiting"


async def test_a_wait_read_with_its_run_names_its_event_and_only_that_run_s(
        fstore: stead.Store) -> None:
    """A run resuming from its wait reads the wait with its own run id (on
    PostgreSQL, the events of that run's day alone): the event that consumed
    it comes with it, and another run's id finds no wait."""
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> Any:
        return await (await run.wait("go", token=False))

    client = stead.Client(fstore, app)
    info, other = await client.start(wf), await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    wait = await _opened(client, info.run_id)
    assert await fstore.wait_and_event(wait.wait_id, run_id=info.run_id) == (wait, None)
    await client.deliver(info.run_id, kind="go", event_id="e-1", payload={"ok": 1})
    read = await fstore.wait_and_event(wait.wait_id, run_id=info.run_id)
    assert read == await fstore.wait_and_event(wait.wait_id)
    assert read is not None and read[1] is not None
    assert (read[0].state, read[1].event_id, read[1].run_id) == ("consumed", "e-1", info.run_id)
    assert await fstore.wait_and_event(wait.wait_id, run_id=other.run_id) is None
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == {"ok": 1}


async def test_two_open_waits_of_one_kind_are_told_apart_by_their_bind(
    fstore: stead.Store,
) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> list[Any]:
        a = await run.wait("same", bind={"i": 1}, token=False)
        b = await run.wait("same", bind={"i": 2}, token=False)
        return list(await asyncio.gather(a, b))

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    first = await client.deliver(info.run_id, kind="same", event_id="1", bind={"i": 1},
                                 payload="a")
    assert isinstance(first, stead.Accepted)
    # One open wait of the kind is left: it is judged on its own bind.
    wrong = await client.deliver(info.run_id, kind="same", event_id="2", bind={"i": 3})
    assert isinstance(wrong, stead.Rejected) and wrong.reason == "bound_value_mismatch"
    second = await client.deliver(info.run_id, kind="same", event_id="3", bind={"i": 2},
                                  payload="b")
    assert isinstance(second, stead.Accepted)
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id) == ["a", "b"]


async def test_an_ambiguous_kind_is_rejected_naming_the_problem(fstore: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> list[Any]:
        a = await run.wait("same", bind={"i": 1}, token=False)
        b = await run.wait("same", bind={"i": 2}, token=False)
        return list(await asyncio.gather(a, b))

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    verdict = await client.deliver(info.run_id, kind="same", event_id="1", bind={"i": 9})
    assert isinstance(verdict, stead.Rejected) and verdict.reason == "wrong_wait"
    assert "2 open waits" in verdict.detail


async def test_a_rejected_event_is_judged_again_when_redelivered(fstore: stead.Store) -> None:
    """A webhook that arrives before its wait opens is rejected; the queue's
    redelivery, once the wait is open, is accepted, and only then a Duplicate."""
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> Any:
        return await (await run.wait("ci_done", token=False))

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    early = await client.deliver(info.run_id, kind="ci_done", event_id="gh-42", payload=1)
    assert isinstance(early, stead.Rejected) and early.reason == "not_waiting"
    await stead.Worker(app, fstore).run_until_idle()
    later = await client.deliver(info.run_id, kind="ci_done", event_id="gh-42", payload=1)
    assert isinstance(later, stead.Accepted)
    again = await client.deliver(info.run_id, kind="ci_done", event_id="gh-42", payload=1)
    assert isinstance(again, stead.Duplicate)
    [stored] = await client.events(info.run_id)
    assert stored.verdict == "accepted"
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id) == 1


def test_a_plain_def_workflow_is_refused_at_registration() -> None:
    app = stead.App("t")
    with pytest.raises(TypeError, match="async def"):
        @app.workflow()
        def wf(run: stead.Run) -> int:  # type: ignore[arg-type]
            return 1


async def test_a_worker_of_the_same_process_wakes_on_a_delivery_at_once(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delivery (or a start) made by a store of this process wakes this
    process's idle worker on the same database itself: no NOTIFY, no look
    at the file. Here the database never tells anyone and the worker's poll
    is a minute away, so only that wakes it."""
    app = stead.App("nearby")
    done: asyncio.Event = asyncio.Event()

    def after(x: Any) -> Any:
        done.set()
        return x

    @app.workflow()
    async def approve(run: stead.Run) -> Any:
        event = await (await run.wait("approval", token=False))
        return await run.step("after", after, event)

    worker_store = await stead.open_store(db_url)
    client_store = await stead.open_store(db_url)  # another store object, same database

    async def told_nothing(timeout: float) -> None:
        await asyncio.sleep(timeout)

    monkeypatch.setattr(worker_store.database, "wait_for_work", told_nothing)
    worker = stead.Worker(app, worker_store, stead.WorkerOptions(poll_interval=60))
    task = asyncio.create_task(worker.run())
    try:
        client = stead.Client(client_store, app)
        info = await client.start(approve)  # the start wakes the worker too
        await client.wait_for(info.run_id, ["waiting"], timeout=20)
        await client.deliver(info.run_id, event_id="e1", kind="approval", payload={"ok": 1})
        await asyncio.wait_for(done.wait(), 20)  # not the minute's poll
        assert await client.result(info.run_id, timeout=20) == {"ok": 1}
    finally:
        worker.stop()
        await task
        await worker_store.close()
        await client_store.close()
