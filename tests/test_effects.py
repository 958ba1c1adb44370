"""Effects: the intent is journaled before the send, and an unknown outcome is
never treated as "it did not happen"."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from typing import Any

import pytest

import stead
from tests.helpers import Calls, Crash, crash_then_resume


class Ledger:
    """An outside service in memory: every call, and what took effect."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.done: dict[str, Any] = {}
        self.crash_on_call: set[int] = set()

    def send(self, key: str, amount: int) -> dict[str, Any]:
        self.calls.append(key)
        if key not in self.done:
            self.done[key] = {"refund": f"rf_{len(self.done) + 1}", "amount": amount}
        if len(self.calls) in self.crash_on_call:
            raise Crash()  # the refund went out; the worker died before recording it
        return dict(self.done[key])


def _status(journal: list[stead.Record]) -> list[str]:
    return [r.status for r in journal if r.kind == "effect"]


async def test_the_intent_is_committed_before_the_effect_runs(
    fstore: stead.Store, db_url: str
) -> None:
    app = stead.App("t")
    seen_before_send: list[list[str]] = []
    other = await stead.open_store(db_url)

    async def send(op: stead.Operation, amount: int) -> str:
        journal = await other.load_journal(op.run_id)
        seen_before_send.append([r.status for r in journal])
        return f"sent {amount} with {op.key}"

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        return await run.effect("refund", send, 4200)

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    result = await client.result(info.run_id, timeout=10)
    assert seen_before_send == [["intent"]]
    assert result == f"sent 4200 with {info.run_id}:0"
    assert _status(await client.journal(info.run_id)) == ["intent", "ok"]
    await other.close()


async def test_unknown_outcome_without_check_stops_the_run_for_a_human(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")
    mail = Ledger()
    mail.crash_on_call = {1}
    after = Calls()

    @app.workflow()
    async def wf(run: stead.Run) -> dict[str, Any]:
        sent = await run.effect("send_mail", lambda op, to: mail.send(op.key, 0), "a@b.c")
        await run.step("after", lambda: after.hit("after"))
        return sent

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await crash_then_resume(app, fstore, clock)
    got = await client.get(info.run_id)
    assert got.status == "outcome_unknown"
    assert got.error is not None
    assert got.error["effect"] == "send_mail" and got.error["key"] == f"{info.run_id}:0"
    assert got.error["arguments"] == {"args": ["a@b.c"], "kwargs": {}, "names": ["to"]}
    assert len(mail.calls) == 1 and after["after"] == 0  # never silently repeated
    # A stopped run is not claimed again.
    await stead.Worker(app, fstore).run_until_idle()
    assert len(mail.calls) == 1

    with pytest.raises(stead.SteadError, match="exactly one decision"):
        await client.reconcile(info.run_id, "send_mail", by="ops")
    resumed = await client.reconcile(
        info.run_id, "send_mail", happened={"refund": "rf_1", "amount": 0},
        by="alice", why="found it in the outbox",
    )
    assert resumed.status == "running"
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == {"refund": "rf_1", "amount": 0}
    assert len(mail.calls) == 1 and after["after"] == 1
    journal = await client.journal(info.run_id)
    assert _status(journal) == ["intent", "reconciled"]
    decision = json.loads(next(r for r in journal if r.status == "reconciled").payload)
    assert decision["by"] == "alice" and decision["why"] == "found it in the outbox"
    with pytest.raises(stead.NotStopped):
        await client.reconcile(info.run_id, "send_mail", not_happened=True, by="bob")


async def test_not_happened_sends_it_again(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")
    mail = Ledger()
    mail.crash_on_call = {1}

    @app.workflow()
    async def wf(run: stead.Run) -> dict[str, Any]:
        return await run.effect("send_mail", lambda op: mail.send(op.key, 0))

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await crash_then_resume(app, fstore, clock)
    await client.reconcile(info.run_id, "send_mail", not_happened=True, by="ops")
    await stead.Worker(app, fstore).run_until_idle()
    assert (await client.result(info.run_id, timeout=10))["refund"] == "rf_1"
    assert mail.calls == [f"{info.run_id}:0"] * 2
    assert _status(await client.journal(info.run_id)) == ["intent", "reconciled", "intent", "ok"]


async def test_compensated_effect_raises_in_the_workflow(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")
    mail = Ledger()
    mail.crash_on_call = {1}

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        try:
            await run.effect("send_mail", lambda op: mail.send(op.key, 0))
        except stead.EffectCompensated as exc:
            return f"compensated: {exc.detail}"
        return "sent"

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await crash_then_resume(app, fstore, clock)
    await client.reconcile(info.run_id, "send_mail", compensate="apology sent", by="ops")
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == "compensated: apology sent"


async def test_idempotent_effect_is_resent_with_the_same_key(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")
    payments = Ledger()
    payments.crash_on_call = {1}

    @app.workflow()
    async def wf(run: stead.Run) -> dict[str, Any]:
        return await run.effect(
            "refund", lambda op, amount: payments.send(op.key, amount), 4200, idempotent=True
        )

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id, timeout=10) == {"refund": "rf_1", "amount": 4200}
    assert payments.calls == [f"{info.run_id}:0"] * 2  # same key: one refund outside
    assert len(payments.done) == 1
    resumes = await client.resumes(info.run_id)
    assert json.loads(resumes[0].detail)["classes"] == {"outcome_unknown": 1}


@pytest.mark.parametrize("found", [True, False])
async def test_check_decides_between_done_and_send(
    fstore: stead.Store, clock: stead.FakeClock, found: bool
) -> None:
    app = stead.App("t")
    payments = Ledger()
    payments.crash_on_call = {1}
    if not found:
        payments.crash_on_call = set()
        payments.send = _crash_before_sending(payments)  # type: ignore[method-assign]

    def lookup(op: stead.Operation) -> stead.Outcome:
        r = payments.done.get(op.key)
        return stead.Outcome.done(r) if r else stead.Outcome.not_found()

    @app.workflow()
    async def wf(run: stead.Run) -> dict[str, Any]:
        return await run.effect(
            "refund", lambda op: payments.send(op.key, 1), check=lookup
        )

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await crash_then_resume(app, fstore, clock)
    assert (await client.result(info.run_id, timeout=10))["refund"] == "rf_1"
    assert len(payments.done) == 1
    statuses = _status(await client.journal(info.run_id))
    if found:
        assert payments.calls == [f"{info.run_id}:0"]  # asked, not resent
        assert statuses == ["intent", "ok"]
    else:
        assert statuses == ["intent", "intent", "ok"]


def _crash_before_sending(ledger: Ledger) -> Any:
    real = ledger.send
    crashed = [False]

    def send(key: str, amount: int) -> dict[str, Any]:
        if not crashed[0]:
            crashed[0] = True
            raise Crash()  # died after the intent, before anything went out
        return real(key, amount)

    return send


async def test_accepted_work_is_polled_never_resubmitted(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    """The coding agent's CI job: accepted as job 471, the worker vanishes; the
    new worker asks about 471 until it finishes and never submits job 472."""
    app = stead.App("t")
    jobs: dict[str, int] = {}
    submitted: list[str] = []
    polls = Calls()

    async def submit(op: stead.Operation, commit: str) -> dict[str, Any]:
        job = str(471 + len(submitted))
        submitted.append(job)
        jobs[job] = 0
        await op.accepted(job)
        raise Crash()  # the worker vanished while CI ran

    def status(op: stead.Operation) -> stead.Outcome:
        assert op.external_id is not None
        polls.hit(op.external_id)
        jobs[op.external_id] += 1
        if jobs[op.external_id] < 3:
            return stead.Outcome.pending()
        return stead.Outcome.done({"job": op.external_id, "passed": True})

    @app.workflow()
    async def wf(run: stead.Run) -> dict[str, Any]:
        return await run.effect("ci", submit, "abc123", check=status, poll_every=0.01)

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id, timeout=10) == {"job": "471", "passed": True}
    assert submitted == ["471"] and polls == {"471": 3}
    assert _status(await client.journal(info.run_id)) == ["intent", "accepted", "ok"]


async def test_a_known_failure_is_retried_then_raised(fstore: stead.Store) -> None:
    app = stead.App("t")
    tries = Calls()

    def charge(op: stead.Operation) -> None:
        tries.hit(op.key)
        raise ValueError("card declined")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        try:
            await run.effect("charge", charge, retry=stead.Retry(attempts=2, backoff=0))
        except stead.EffectFailed as exc:
            return f"{exc.error_type}: {exc.message} after {exc.attempts}"
        return "charged"

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == "ValueError: card declined after 2"
    assert list(tries.values()) == [2]  # both attempts carried the same key
    assert _status(await client.journal(info.run_id)) == ["intent", "error", "intent", "error"]


async def test_a_timeout_is_an_unknown_outcome_not_a_failure(fstore: stead.Store) -> None:
    app = stead.App("t")

    async def slow(op: stead.Operation) -> None:
        await asyncio.sleep(10)

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        await run.effect("slow", slow, timeout=0.05)

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    got = await client.get(info.run_id)
    assert got.status == "outcome_unknown"
    assert _status(await client.journal(info.run_id)) == ["intent", "unknown"]


async def test_outcome_uncertain_from_the_function_is_unknown(fstore: stead.Store) -> None:
    app = stead.App("t")

    def flaky(op: stead.Operation) -> None:
        raise stead.OutcomeUncertain("connection reset after the request was written")

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        await run.effect("flaky", flaky)

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    got = await client.get(info.run_id)
    assert got.status == "outcome_unknown"
    assert got.error is not None and "connection reset" in json.dumps(
        [json.loads(r.payload) for r in await client.journal(info.run_id)]
    )


@dataclasses.dataclass
class Receipt:
    refund: str
    amount: int


async def test_a_checks_result_must_fit_the_effects_return_type(fstore: stead.Store) -> None:
    """A check answering done with another shape than `fn` returns records
    nothing: the run stops for a person, the message naming the shape."""
    app = stead.App("t")

    def refund(op: stead.Operation) -> Receipt:
        raise stead.OutcomeUncertain("the bank hung up")

    def find(op: stead.Operation) -> stead.Outcome:
        return stead.Outcome.done("rf_1")  # the id alone, not a Receipt

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        return (await run.effect("refund", refund, check=find)).refund

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    got = await client.get(info.run_id)
    assert got.status == "outcome_unknown"
    assert got.error is not None and got.error["type"] == "InvalidCheckResult"
    assert "does not fit the effect's return type Receipt" in got.error["message"]
    assert got.error["checked"] is True  # a retry asks the fixed check again
    assert _status(await client.journal(info.run_id)) == ["intent", "unknown"]
    await client.reconcile(info.run_id, "refund", happened={"refund": "rf_1", "amount": 5},
                           by="ops")
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "rf_1"


async def test_a_stop_or_a_failure_inside_a_task_group_is_itself(
    fstore: stead.Store, caplog: pytest.LogCaptureFixture,
) -> None:
    """A task group (asyncio's here, anyio's in an MCP session) wraps what ends
    the workflow in an exception group: the run still stops for a person, and
    a failure is stored as its own type and message, not as the group's."""
    app = stead.App("t")

    def flaky(op: stead.Operation) -> None:
        raise stead.OutcomeUncertain("connection reset after the request was written")

    def broken() -> None:
        raise LookupError("no order 123")

    @app.workflow()
    async def wf(run: stead.Run, effect: bool) -> None:
        async with asyncio.TaskGroup() as group:
            if effect:
                group.create_task(run.effect("flaky", flaky))
            else:
                group.create_task(run.step("look up", broken, retry=stead.Retry(attempts=1)))

    caplog.set_level(logging.INFO, logger="stead.worker")
    client = stead.Client(fstore, app)
    stopped = await client.start(wf, True)
    failed = await client.start(wf, False)
    await stead.Worker(app, fstore).run_until_idle()
    assert (await client.get(stopped.run_id)).status == "outcome_unknown"
    error = (await client.get(failed.run_id)).error
    assert error is not None and error["type"] == "StepError"
    assert "no order 123" in error["message"]
    logged = [r.getMessage() for r in caplog.records if r.name == "stead.worker"]
    assert any(f"run {failed.run_id} failed: StepError: " in m and "no order 123" in m
               for m in logged), logged


async def test_the_fencing_token_is_the_epoch(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")
    tokens: list[int] = []
    ledger = Ledger()
    ledger.crash_on_call = {1}

    def send(op: stead.Operation) -> dict[str, Any]:
        tokens.append(op.fencing_token)
        return ledger.send(op.key, 1)

    @app.workflow()
    async def wf(run: stead.Run) -> dict[str, Any]:
        return await run.effect("send", send, idempotent=True)

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await crash_then_resume(app, fstore, clock)
    await client.result(info.run_id, timeout=10)
    assert tokens == [1, 2]


async def test_reconcile_errors_are_clear(fstore: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        return None

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    with pytest.raises(stead.NotStopped, match="no effect 'nope'"):
        await client.reconcile(info.run_id, "nope", not_happened=True, by="ops")
    with pytest.raises(stead.UnknownRun):
        await client.reconcile("missing", "x", not_happened=True, by="ops")
    with pytest.raises(stead.SteadError, match="who decides"):
        await client.reconcile(info.run_id, "x", not_happened=True, by="")


async def test_a_decision_that_does_not_fit_stops_the_run_again(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")
    mail = Ledger()
    mail.crash_on_call = {1}

    def send(op: stead.Operation) -> dict[str, int]:
        mail.send(op.key, 0)
        return {"id": 1}

    @app.workflow()
    async def wf(run: stead.Run) -> dict[str, int]:
        return await run.effect("send_mail", send)

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await crash_then_resume(app, fstore, clock)
    await client.reconcile(info.run_id, "send_mail", happened={"id": "not a number"}, by="ops")
    await stead.Worker(app, fstore).run_until_idle()
    got = await client.get(info.run_id)
    assert got.status == "outcome_unknown"
    assert got.error is not None and "does not fit" in got.error["message"]
    await client.reconcile(info.run_id, "send_mail", happened={"id": 7}, by="ops")
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == {"id": 7}
    assert len(mail.calls) == 1


async def test_a_stop_waits_for_a_sync_effect_in_flight_and_journals_it(
    fstore: stead.Store,
) -> None:
    """The thread cannot be stopped: the worker waits past its grace period and
    records the outcome, instead of leaving a known outcome to reconcile."""
    app = stead.App("t")
    started = asyncio.Event()
    loop = asyncio.get_running_loop()

    def pay(op: stead.Operation) -> str:
        loop.call_soon_threadsafe(started.set)
        import time

        time.sleep(0.4)
        return "paid"

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        receipt = await run.effect("pay", pay)
        await run.step("after", lambda: None)
        return receipt

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    worker = stead.Worker(app, fstore, stead.WorkerOptions(shutdown_grace=0.05))
    task = asyncio.create_task(worker.run())
    await started.wait()
    worker.stop()
    await asyncio.wait_for(task, 10)
    assert _status(await client.journal(info.run_id)) == ["intent", "ok"]
    row = await client.get(info.run_id)
    assert row.status == "running" and row.lease_owner is None
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "paid"
