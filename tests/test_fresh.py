"""`fresh=`: a recorded answer that is a proposal (a plan) is asked again after
a takeover whose intent changed, never after a plain crash; a proposal
something acted on since is history: reused, and it never pauses the run."""

from __future__ import annotations

from typing import Any

import stead
from tests.helpers import Calls, Crash


def agent_app(service: dict[str, str], model: stead.ScriptedModel, sent: list[str],
              *, with_effect: bool) -> tuple[stead.App, Any]:
    app = stead.App("agent")
    crashes = Calls()

    @app.policy(version="plans")
    def policy(*_: Any) -> stead.Continue:
        return stead.Continue(version=service["version"])

    def crash_once(tag: str) -> str:
        if not crashes[tag]:
            crashes.hit(tag)
            raise Crash()
        return tag

    @app.workflow()
    async def agent(run: stead.Run) -> str:
        plan = await run.llm("plan", model, [{"role": "user", "content": "plan"}],
                             fresh="on_resume")
        if with_effect:
            await run.effect("send", lambda op, text: sent.append(text), plan.text)
        await run.step("crash-a", crash_once, "a")
        await run.step("crash-b", crash_once, "b")
        return plan.text

    return app, agent


async def _take_over(app: stead.App, store: stead.Store, clock: stead.FakeClock) -> None:
    clock.advance(31)
    await stead.Worker(app, store, stead.WorkerOptions(lease_seconds=30)).run_until_idle()


async def test_a_fresh_plan_is_asked_again_after_a_policy_change_not_after_a_crash(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    service = {"version": "plans@1"}
    model = stead.ScriptedModel(["plan-1", "plan-2"])
    app, agent = agent_app(service, model, [], with_effect=False)
    client = stead.Client(fstore, app)
    info = await client.start(agent)
    await _take_over(app, fstore, clock)  # crashes at crash-a
    await _take_over(app, fstore, clock)  # a plain crash: the plan is reused; crashes at b
    assert len(model.calls) == 1
    service["version"] = "plans@2"  # the policy changes
    await _take_over(app, fstore, clock)
    assert await client.result(info.run_id, timeout=10) == "plan-2"
    assert len(model.calls) == 2
    journal = await client.journal(info.run_id)
    assert [r.name for r in journal if r.kind == "llm"] == ["plan", "plan"]  # kept, not deleted
    assert [r.kind for r in journal].count("cut") == 1
    classes = (await client.resumes(info.run_id))[-1].details.classes
    assert classes.get(stead.records.ResumeClass.REVALIDATE) == 1
    await _take_over(app, fstore, clock)  # nothing left to do: still plan-2
    assert await client.result(info.run_id, timeout=10) == "plan-2"


async def test_a_fresh_plan_acted_on_is_history_not_a_pause(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    service, sent = {"version": "plans@1"}, []
    model = stead.ScriptedModel(["plan-1", "plan-2"])
    app, agent = agent_app(service, model, sent, with_effect=True)
    client = stead.Client(fstore, app)
    info = await client.start(agent)
    await _take_over(app, fstore, clock)  # sends plan-1, crashes at crash-a
    await _take_over(app, fstore, clock)  # a plain crash: nothing asked again; crashes at b
    service["version"] = "plans@2"
    await _take_over(app, fstore, clock)
    assert await client.result(info.run_id, timeout=10) == "plan-1"
    assert sent == ["plan-1"] and len(model.calls) == 1
    last = (await client.resumes(info.run_id))[-1].details.intent or {}
    assert last["changed"] and last["diff"]["policy_version"] == ["plans@1", "plans@2"]


async def test_fresh_takes_only_known_values(fstore: stead.Store) -> None:
    app = stead.App("agent")

    @app.workflow()
    async def odd(run: stead.Run) -> int:
        return int(await run.step("x", lambda: 1, fresh="sometimes"))

    client = stead.Client(fstore, app)
    info = await client.start(odd)
    await stead.Worker(app, fstore).run_until_idle()
    row = await client.get(info.run_id)
    assert row.status == "failed" and "on_resume" in row.error["message"]
