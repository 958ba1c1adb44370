"""Details of the resume contract: an effect's dedup window, a delivery's task
check, a compensation run as an effect of its own, and the attempt of a step
that was in flight when its worker died (with real processes:
test_crash_processes.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

import pytest

import stead
from tests.helpers import Crash, crash_then_resume


class Mail:
    """A mail service that dedups on the idempotency key; the first call
    dies after sending (the outcome is unknown to the run)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def send(self, op: stead.Operation, to: str) -> str:
        self.calls.append(op.key)
        if len(self.calls) == 1:
            raise Crash()
        return f"sent to {to}"


def _mail_app(mail: Mail, window: dt.timedelta) -> stead.App:
    app = stead.App("dedup")

    @app.workflow()
    async def notify(run: stead.Run, to: str) -> str:
        return await run.effect("send_mail", mail.send, to, idempotent=window)

    return app


@pytest.mark.parametrize("late", [False, True], ids=["within", "past"])
async def test_an_unknown_outcome_is_resent_only_within_the_dedup_window(
    fstore: stead.Store, clock: stead.FakeClock, late: bool
) -> None:
    mail = Mail()
    app = _mail_app(mail, dt.timedelta(hours=24))
    client = stead.Client(fstore, app)
    info = await client.start("notify", "a@example.com")
    await stead.Worker(app, fstore).run_until_idle()  # dies with the mail sent, unrecorded
    clock.advance(25 * 3600 if late else 31)
    await stead.Worker(app, fstore).run_until_idle()

    got = await client.get(info.run_id)
    if not late:
        assert got.status == "completed" and got.result == "sent to a@example.com"
        assert mail.calls == [f"{info.run_id}:0"] * 2  # resent with the same key
        return
    assert got.status == "outcome_unknown" and mail.calls == [f"{info.run_id}:0"]
    stop = got.outcome_unknown
    assert stop is not None and stop.name == "send_mail"
    assert "dedup window (1 day, 0:00:00) has passed" in stop.known
    [intent] = [json.loads(r.payload) for r in await client.journal(info.run_id)
                if r.status == "intent"]
    assert intent["dedup_window"] == 24 * 3600
    # A person decides; the run goes on from the decision.
    await client.reconcile(info.run_id, "send_mail", happened="sent to a@example.com", by="ops")
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "sent to a@example.com"


async def test_a_zero_or_odd_dedup_window_is_refused_where_the_effect_is_made(
    store: stead.Store,
) -> None:
    app = stead.App("bad")

    @app.workflow()
    async def wf(run: stead.Run, which: str) -> str:
        bad: Any = dt.timedelta(0) if which == "zero" else "1 day"
        try:
            await run.effect("x", lambda op: None, idempotent=bad)
        except (ValueError, TypeError) as exc:
            return type(exc).__name__
        return "sent"

    client = stead.Client(store, app)
    zero, odd = await client.start(wf, "zero"), await client.start(wf, "odd")
    await stead.Worker(app, store).run_until_idle()
    # stead.InvalidValue: a ValueError and a SteadError.
    assert await client.result(zero.run_id, timeout=5) == "InvalidValue"
    assert await client.result(odd.run_id, timeout=5) == "TypeError"


# -- deliveries name their task ----------------------------------------------------
async def test_a_delivery_naming_another_task_is_refused_and_stores_nothing(
    store: stead.Store,
) -> None:
    app = stead.App("approvals")

    @app.workflow()
    async def approve(run: stead.Run) -> Any:
        return await (await run.wait("decision", token=False))

    client = stead.Client(store, app)
    info = await client.start(approve, task_id="order-123")
    loose = await client.start(approve)
    await stead.Worker(app, store).run_until_idle()
    with pytest.raises(stead.TaskMismatch, match=r"task 'order-124'.*of task 'order-123'"):
        await client.deliver(info.run_id, kind="decision", event_id="e1", payload=1,
                             task_id="order-124")
    with pytest.raises(stead.TaskMismatch, match="of no task"):
        await client.deliver(loose.run_id, kind="decision", event_id="e1", payload=1,
                             task_id="order-123")
    assert await client.events(info.run_id) == [] and await client.events(loose.run_id) == []
    assert isinstance(await client.deliver(info.run_id, kind="decision", event_id="e1",
                                           payload=1, task_id="order-123"), stead.Accepted)
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == 1
    # An unknown run is judged (and stored) as one, task or not.
    rejected = await client.deliver("nope", kind="decision", event_id="e2", task_id="x")
    assert isinstance(rejected, stead.Rejected) and rejected.reason == "unknown_run"


# -- an attempt in flight when its worker died counts ------------------------------
def _in_flight_app(store: stead.Store, retry: stead.Retry | None) -> tuple[stead.App, list[int]]:
    """`slow` dies (in-process) once `quick`, its sibling, is journaled: its
    started marker rode along with that commit."""
    app = stead.App("attempts")
    tries: list[int] = []

    async def slow(run_id: str) -> str:
        tries.append(1)
        if len(tries) == 1:
            while not any(r.name == "quick" and r.status == "ok"
                          for r in await store.load_journal(run_id)):
                await asyncio.sleep(0.01)
            raise Crash()
        return "slow"

    @app.workflow()
    async def pair(run: stead.Run) -> list[str]:
        try:
            return list(await asyncio.gather(
                run.step("slow", slow, run.id, retry=retry),
                run.step("quick", lambda: "quick")))
        except stead.StepError as exc:
            return [exc.error_type, str(exc.attempts)]

    return app, tries


@pytest.mark.parametrize("retry", [None, stead.Retry(attempts=3, backoff=0)])
async def test_a_step_in_flight_when_its_worker_died_is_counted_as_an_attempt(
    fstore: stead.Store, clock: stead.FakeClock, retry: stead.Retry | None,
) -> None:
    app, tries = _in_flight_app(fstore, retry)
    client = stead.Client(fstore, app)
    info = await client.start("pair")
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id, timeout=5) == ["slow", "quick"]
    assert len(tries) == 2
    slow = [(r.attempt, r.status, r.epoch) for r in await client.journal(info.run_id)
            if r.name == "slow"]
    assert slow == [(1, "started", 1), (2, "ok", 2)]


async def test_a_step_whose_last_attempt_died_in_flight_fails_without_running_again(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    app, tries = _in_flight_app(fstore, stead.Retry(attempts=1))
    client = stead.Client(fstore, app)
    info = await client.start("pair")
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id, timeout=5) == ["WorkerDied", "1"]
    assert len(tries) == 1  # not run again: its one attempt died
    [error] = [r for r in await client.journal(info.run_id)
               if r.name == "slow" and r.status == "error"]
    assert "was in flight when its worker died" in json.loads(error.payload)["message"]


async def test_a_step_alone_commits_no_marker(store: stead.Store) -> None:
    app = stead.App("alone")

    @app.workflow()
    async def one(run: stead.Run) -> int:
        return await run.step("a", lambda: 1) + await run.step("b", lambda: 2)

    client = stead.Client(store, app)
    info = await client.start(one)
    await stead.Worker(app, store).run_until_idle()
    # Each step's marker was dropped unwritten: its outcome was the next commit.
    assert [r.status for r in await client.journal(info.run_id)] == ["ok", "ok"]


# -- a compensation is an effect of its own ----------------------------------------
class Bank:
    """Charges and reversals, by key; `die_in` names the calls that die
    after acting (the run cannot know their outcome)."""

    def __init__(self, *die_in: str) -> None:
        self.calls: list[tuple[str, str]] = []
        self.die_in = set(die_in)

    def charge(self, op: stead.Operation, amount: int) -> str:
        self.calls.append(("charge", op.key))
        if "charge" in self.die_in:
            self.die_in.discard("charge")
            raise Crash()
        return "ch_1"

    def reverse(self, op: stead.Operation, amount: int) -> str:
        self.calls.append(("reverse", op.key))
        if "reverse" in self.die_in:
            self.die_in.discard("reverse")
            raise Crash()
        return f"rv_{amount}"


def _bank_app(bank: Bank) -> stead.App:
    app = stead.App("bank")

    @app.workflow()
    async def pay(run: stead.Run, amount: int) -> dict[str, Any]:
        try:
            charge = await run.effect("charge", bank.charge, amount, compensate=bank.reverse)
        except stead.EffectCompensated as exc:
            return {"compensated": exc.detail, "reversal": exc.compensation}
        return {"charge": charge}

    return app


async def test_reconcile_compensate_runs_the_compensation_as_a_tracked_effect(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    bank = Bank("charge", "reverse")
    app = _bank_app(bank)
    client = stead.Client(fstore, app)
    info = await client.start("pay", 500)
    await crash_then_resume(app, fstore, clock)  # the charge's outcome is unknown: stop
    assert (await client.get(info.run_id)).status == "outcome_unknown"
    charge_key = f"{info.run_id}:0"

    await client.reconcile(info.run_id, "charge", compensate="reverse it", by="ops")
    # The reversal's intent is journaled, then it dies after acting: its
    # outcome is unknown in turn, and the run stops on it, by its own name.
    await crash_then_resume(app, fstore, clock)
    stopped = await client.get(info.run_id)
    assert stopped.status == "outcome_unknown"
    assert stopped.outcome_unknown is not None
    assert (stopped.outcome_unknown.name, stopped.outcome_unknown.key) == (
        "charge.compensate", f"{charge_key}:compensate")
    assert bank.calls == [("charge", charge_key), ("reverse", f"{charge_key}:compensate")]

    await client.reconcile(info.run_id, "charge.compensate", happened="rv_500", by="ops")
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == {
        "compensated": "reverse it", "reversal": "rv_500"}
    assert len(bank.calls) == 2  # the reversal was never sent twice
    undo = [(r.status, r.attempt) for r in await client.journal(info.run_id)
            if r.name == "charge.compensate"]
    assert undo == [("intent", 1), ("reconciled", 1)]


async def test_a_compensation_that_succeeds_is_journaled_and_returned(
    store: stead.Store,
) -> None:
    bank = Bank()
    app = stead.App("bank2")

    def check(op: stead.Operation) -> stead.Outcome:
        return stead.Outcome.unknown("the bank does not say")

    @app.workflow()
    async def pay(run: stead.Run, amount: int) -> Any:
        def charge(op: stead.Operation, n: int) -> str:
            raise stead.OutcomeUncertain("timed out")

        try:
            return await run.effect("charge", charge, amount, check=check,
                                    compensate=stead.Compensation(bank.reverse, idempotent=True))
        except stead.EffectCompensated as exc:
            return exc.compensation

    client = stead.Client(store, app)
    info = await client.start(pay, 70)
    await stead.Worker(app, store).run_until_idle()
    await client.reconcile(info.run_id, "charge", compensate={"by": "bank"}, by="ops")
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "rv_70"
    undo = [r.status for r in await client.journal(info.run_id)
            if r.name == "charge.compensate"]
    assert undo == ["intent", "ok"]
