"""Details of the resume contract: an effect's dedup window, a delivery's task
check, a compensation run as an effect of its own, and the attempt of a step
that was in flight when its worker died (with real processes:
test_crash_processes.py)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

import stead
from tests.helpers import Crash


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
    assert await client.result(zero.run_id, timeout=5) == "ValueError"
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
