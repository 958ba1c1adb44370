"""Authority bounds the whole run: once every grant it holds has expired (or
it holds none under an app that declares its tools), or its wall-clock budget
is spent, the run pauses before its next live model call, step or effect. A
renewal (or a larger budget) lets it go on; a denial ends it. Replayed
records are never blocked and never spend twice."""

from __future__ import annotations

from typing import Any

import stead
from stead import operator
from stead.views import context_view
from tests.helpers import Calls, Crash

HOUR = 3600.0
LEASE = 30.0


def looping_app(model: stead.ScriptedModel, calls: Calls, *, tools: list[str] | None = None
                ) -> tuple[stead.App, Any]:
    """An agent loop: think, wait for a go-ahead, think again, then a step."""
    app = stead.App("agent", tools=tools)

    def look(what: str) -> str:
        calls.hit(what)
        return what

    @app.workflow()
    async def agent(run: stead.Run) -> list[str]:
        first = await run.llm("plan", model, [{"role": "user", "content": "plan"}])
        await (await run.wait("go", token=False))
        second = await run.llm("next", model, [{"role": "user", "content": "next"}])
        looked: str = await run.step("look", look, "order")
        return [first.text, second.text, looked]

    return app, agent


async def _go(client: stead.Client, run_id: str) -> None:
    verdict = await client.deliver(run_id, kind="go", event_id=f"go-{run_id}", payload={})
    assert isinstance(verdict, stead.Accepted)


async def _lapsed(client: stead.Client, agent: Any, clock: stead.FakeClock,
                  grants: list[stead.Grant]) -> stead.RunInfo:
    """Start the loop under `grants`, let every one of them expire while it
    waits, then give it the go-ahead and let a worker take it as far as it goes."""
    assert client.app is not None
    info = await client.start(agent, intent=stead.Intent(goal="loop", grants=grants))
    await stead.Worker(client.app, client.store).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    clock.advance(max(g.expires_in or 0.0 for g in grants) + 1)
    await _go(client, info.run_id)
    await stead.Worker(client.app, client.store).run_until_idle()
    return info


async def test_after_every_grant_expired_the_next_model_call_pauses_naming_the_grant(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    model, calls = stead.ScriptedModel(["plan", "next"]), Calls()
    app, agent = looping_app(model, calls)
    client = stead.Client(fstore, app)
    info = await _lapsed(client, agent, clock, [
        stead.Grant("lookup", {}, expires_in=60), stead.Grant("refund", {}, expires_in=90)])

    row = await client.get(info.run_id)
    assert row.status == "paused" and row.error is not None
    assert row.error["cause"] == "grants" and row.error["grant"] == "refund"
    assert row.error["grants"] == ["lookup", "refund"]
    assert "stead grants renew RUN refund" in row.error["message"]
    assert len(model.calls) == 1 and calls == {}  # the replayed plan was not blocked

    await client.renew_grant(info.run_id, "refund", expires_in=HOUR, by="ops", why="go on")
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == ["plan", "next", "order"]
    assert len(model.calls) == 2 and calls == {"order": 1}  # nothing asked or done twice


async def test_a_step_after_the_last_grant_expired_pauses_and_a_denial_ends_the_run(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    calls = Calls()
    app = stead.App("agent")

    def look(what: str) -> str:
        calls.hit(what)
        return what

    @app.workflow()
    async def agent(run: stead.Run) -> str:
        await run.step("first", look, "first")
        await run.sleep(600)
        looked: str = await run.step("second", look, "second")
        return looked

    client = stead.Client(fstore, app)
    info = await client.start(agent, intent=stead.Intent(goal="g", grants=[
        stead.Grant("refund", {}, expires_in=60)]))
    await stead.Worker(app, fstore).run_until_idle()
    clock.advance(601)
    await stead.Worker(app, fstore).run_until_idle()
    row = await client.get(info.run_id)
    assert row.status == "paused" and row.error is not None and row.error["cause"] == "grants"
    assert calls == {"first": 1}

    denied = await client.deny_grant(info.run_id, "refund", by="ops", why="withdrawn")
    assert denied.status == "revalidation_failed"
    await stead.Worker(app, fstore).run_until_idle()
    assert calls == {"first": 1}


async def test_a_run_without_a_grant_under_an_app_with_tools_acts_only_once_granted(
    fstore: stead.Store,
) -> None:
    model, calls = stead.ScriptedModel(["plan", "next"]), Calls()
    app, agent = looping_app(model, calls, tools=["refund"])
    client = stead.Client(fstore, app)
    info = await client.start(agent)  # no intent at all
    await stead.Worker(app, fstore).run_until_idle()
    row = await client.get(info.run_id)
    assert row.status == "paused" and row.error is not None
    assert row.error["cause"] == "grants" and "holds no grant" in row.error["message"]
    assert model.calls == []

    await client.resume(info.run_id, by="ops", why="granted", intent=stead.Intent(
        goal="loop", grants=[stead.Grant("refund", {}, expires_in=HOUR)]))
    await stead.Worker(app, fstore).run_until_idle()
    await _go(client, info.run_id)
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == ["plan", "next", "order"]


async def test_an_effect_naming_no_tool_pauses_when_the_run_holds_no_grant_under_tools(
    fstore: stead.Store,
) -> None:
    mails: list[str] = []
    app = stead.App("shop", tools=["refund"])

    @app.workflow()
    async def notify(run: stead.Run) -> None:
        await run.effect("mail", lambda op: mails.append("sent"))

    client = stead.Client(fstore, app)
    info = await client.start(notify)
    await stead.Worker(app, fstore).run_until_idle()
    row = await client.get(info.run_id)
    assert row.status == "paused" and row.error is not None
    assert row.error["cause"] == "grants" and row.error["effect"] == "mail"
    assert mails == []


async def test_a_wall_clock_budget_counts_waits_and_takeovers_and_a_larger_one_resumes(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    model, crashed = stead.ScriptedModel(["plan", "next"]), Calls()
    app = stead.App("agent")

    def crash_once() -> None:
        if not crashed["c"]:
            crashed.hit("c")
            raise Crash()

    @app.workflow()
    async def agent(run: stead.Run) -> str:
        await run.llm("plan", model, [{"role": "user", "content": "plan"}])
        await run.step("crash", crash_once)
        await (await run.wait("go", token=False))
        answer = await run.llm("next", model, [{"role": "user", "content": "next"}])
        return answer.text

    client = stead.Client(fstore, app)
    info = await client.start(agent, intent=stead.Intent(
        goal="loop", budget=stead.Budget(seconds=1000)))
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=LEASE)).run_until_idle()
    clock.advance(LEASE + 1)  # a crash, then a takeover: the clock keeps counting
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=LEASE)).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    clock.advance(1000 - LEASE)  # the wait spends the rest
    await _go(client, info.run_id)
    await stead.Worker(app, fstore).run_until_idle()

    row = await client.get(info.run_id)
    assert row.status == "paused" and row.error is not None, row
    assert row.error["cause"] == "budget" and "waits included" in row.error["message"]
    assert row.error["budget"]["used"]["seconds"] == 1001
    assert len(model.calls) == 1  # the replayed plan was neither blocked nor asked again

    await client.resume(info.run_id, by="ops", why="an hour more", intent=stead.Intent(
        goal="loop", budget=stead.Budget(seconds=1000 + HOUR)))
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == "next"
    assert len(model.calls) == 2


async def test_a_successor_inherits_the_seconds_its_predecessor_did_not_use(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    app = stead.App("agent")

    @app.workflow()
    async def turns(run: stead.Run, left: int) -> int:
        if left == 0:
            return 0
        await run.sleep(100)
        await run.continue_as_new(left - 1)

    client = stead.Client(fstore, app)
    info = await client.start(turns, 1, intent=stead.Intent(
        goal="turns", budget=stead.Budget(seconds=1000)))
    await stead.Worker(app, fstore).run_until_idle()
    clock.advance(101)
    await stead.Worker(app, fstore).run_until_idle()
    successor = (await client.get(info.run_id)).result["continued_as"]
    inherited = stead.Intent.loads((await client.intents(successor))[-1].intent)
    assert inherited.budget is not None and inherited.budget.seconds == 899


def test_the_decision_context_shows_a_wall_clock_budget() -> None:
    row = stead.records.IntentRow(
        run_id="r", version=1, intent=stead.Intent(
            goal="g", budget=stead.Budget(model_calls=2, seconds=600)).dumps(),
        author="me", why="start", at=0.0)
    text = context_view.render([row], [], [], 10.0)
    assert "model_calls 2 of 2 left, seconds 600 from the run's start" in text
    assert "seconds 590 of 600 left" in context_view.render([row], [], [], 10.0, started=0.0)


async def test_the_operator_renews_a_lapsed_run_from_what_needs_a_human(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    model, calls = stead.ScriptedModel(["plan", "next"]), Calls()
    app, agent = looping_app(model, calls)
    client = stead.Client(fstore, app)
    info = await _lapsed(client, agent, clock, [stead.Grant("refund", {}, expires_in=60)])

    [attention] = [a for a in await operator.needs_a_human(client)
                   if a.run.run_id == info.run_id]
    offered = {(a.name, target) for a, target in attention.actions}
    assert ("renew_grant", "refund") in offered and ("deny_grant", "refund") in offered
    assert "every grant of the run expired" in attention.summary
    done = await operator.act(client, "renew_grant", operator.Decision(
        info.run_id, "refund", {"expires_in": "3600"}, by="ops", why="go on"))
    assert "renewed" in done.message
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == ["plan", "next", "order"]
