"""A takeover's revalidation across an agent loop: what is a change (and what
is only reported), the plan as a proposal, the policy judging the step the
run is about to take, and one operator decision clearing a pause."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stead
import stead.views.context_view
import stead.views.timeline
from stead import policy, worlds
from stead.records import Record, RecordKind, RecordStatus
from stead.workflow import revalidation
from tests.helpers import Calls, Crash
from tests.workers.procs import KILLED

LEASE = 30.0


async def _take_over(app: stead.App, store: stead.Store, clock: stead.FakeClock) -> None:
    clock.advance(LEASE + 1)
    await stead.Worker(app, store, stead.WorkerOptions(lease_seconds=LEASE)).run_until_idle()


def _crash_once(crashes: Calls, tag: str) -> str:
    if not crashes[tag]:
        crashes.hit(tag)
        raise Crash()
    return tag


# -- what is a change -------------------------------------------------------------------
def _snap(intent: stead.Intent, version: int, world: dict[str, Any] | None,
          policy_version: str = "p@1") -> dict[str, Any]:
    return policy.snapshot(intent, version, policy_version, 100.0, world)


def test_a_new_intent_version_and_budget_use_are_reported_not_changes() -> None:
    intent = stead.Intent(goal="refund", grants=[stead.Grant("refund", {"max_amount": 50})],
                          budget=stead.Budget(model_calls=3))
    world = worlds.world(4, {"status": "open"})
    d = policy.diff(_snap(intent, 1, world), _snap(intent, 2, world))
    d["budget"] = {"used": {"model_calls": 2}}
    assert d["intent_version"] == [1, 2]
    assert not policy.changed(d)


def test_goal_grants_policy_and_world_are_changes() -> None:
    intent = stead.Intent(goal="refund", grants=[stead.Grant("refund", {"max_amount": 50})])
    world = worlds.world(4, {"status": "open", "amount": 10})
    before = _snap(intent, 1, world)
    narrowed = stead.Intent(goal="refund", grants=[stead.Grant("refund", {"max_amount": 20})])
    assert policy.diff(before, _snap(narrowed, 2, world))["grants"]["narrowed"]
    assert policy.changed(policy.diff(before, _snap(
        stead.Intent(goal="other", grants=intent.grants), 2, world)))
    assert policy.changed(policy.diff(before, _snap(intent, 1, world, "p@2")))
    moved = policy.diff(before, _snap(intent, 1, worlds.world(5, {"status": "held",
                                                                    "amount": 10})))
    assert moved["world"] == {"version": [4, 5], "keys": ["status"]}
    assert policy.changed(moved)


def test_the_run_s_own_state_writes_are_the_world_it_knows() -> None:
    before = _snap(stead.Intent(goal="g"), 1, worlds.world(1, {"a": 1}))
    own = Record(seq=3, addr="0:3", attempt=1, kind=RecordKind.STATE,
                 name="update", digest="d", status=RecordStatus.OK,
                 payload='{"version": 2, "data": {"a": 2}}', epoch=1, at=1.0)
    seen = revalidation.seen_world(before, [own])
    assert seen == worlds.world(2, {"a": 2})
    assert revalidation.seen_world(before, []) == before["world"]


# -- a plain crash re-asks nothing ------------------------------------------------------
def _loop_app(model: stead.ScriptedModel, sent: list[str], crashes: Calls,
              points: list[str]) -> tuple[stead.App, Any]:
    app = stead.App("loop")

    def crash(tag: str) -> str:
        return _crash_once(crashes, tag)

    @app.policy(version="p@1")
    def judge(intent: stead.Intent | None, state: dict[str, Any], run: stead.RunRow,
              action: stead.Action | None) -> stead.Continue:
        return stead.Continue()

    @app.workflow()
    async def loop(run: stead.Run, turns: int) -> list[str]:
        done = []
        for turn in range(turns):
            plan = await run.propose("next", model, [{"role": "user", "content": f"t{turn}"}])
            for i, point in enumerate(points):
                if point == "effect":
                    await run.effect("send", lambda op, text: sent.append(text), plan.text)
                elif point == "state":
                    facts = await run.state.get()
                    await run.state.update({"turn": turn}, expect_version=facts.version)
                elif point == "wait":
                    await (await run.wait("go", token=False))
                else:
                    await run.step(f"crash-{turn}-{i}", crash, f"{turn}-{i}")
            done.append(plan.text)
        return done

    return app, loop


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.integers(1, 3),
       points=st.lists(st.sampled_from(["effect", "state", "wait", "crash"]), min_size=1,
                       max_size=4),
       budget=st.booleans())
async def test_a_plain_crash_never_re_asks_a_model_and_never_pauses(
    fstore: stead.Store, clock: stead.FakeClock, turns: int, points: list[str], budget: bool,
) -> None:
    model = stead.ScriptedModel([f"plan-{i}" for i in range(turns)])
    sent: list[str] = []
    crashes = Calls()
    app, loop = _loop_app(model, sent, crashes, points)
    client = stead.Client(fstore, app)
    intent = stead.Intent(goal="loop", grants=[stead.Grant("send")],
                          budget=stead.Budget(model_calls=10) if budget else None)
    info = await client.start(loop, turns, intent=intent)
    for n in range(2 * turns * len(points) + 2):
        row = await client.get(info.run_id)
        if row.status == "waiting":  # a person answers, while no worker runs
            for w in await client.waits(run_id=info.run_id):
                await client.deliver(info.run_id, wait_id=w.wait_id, event_id=f"e{n}",
                                     payload={})
        elif row.status not in ("pending", "running"):
            break
        await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=LEASE)
                           ).run_until_idle()
        clock.advance(LEASE + 1)
    row = await client.get(info.run_id)
    assert row.status == "completed", row.error
    assert len(model.calls) == turns  # each proposal asked once, whatever crashed
    assert sent == [f"plan-{i}" for i in range(turns) for _ in range(points.count("effect"))]
    for r in await client.resumes(info.run_id):
        assert not (r.details.intent or {}).get("changed"), r.details.intent


# -- the plan is a proposal -------------------------------------------------------------
async def test_a_policy_change_during_a_wait_asks_for_the_next_step_not_a_pause(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    service = {"version": "refunds@1"}
    seen: list[tuple[str, str | None]] = []
    model = stead.ScriptedModel(["check eligibility", "send refund"])
    app = stead.App("loop")

    @app.policy(version="refunds")
    def judge(intent: stead.Intent | None, state: dict[str, Any], run: stead.RunRow,
              action: stead.Action | None) -> stead.Continue:
        seen.append((service["version"], None if action is None else action.name))
        return stead.Continue(version=service["version"])

    @app.workflow()
    async def loop(run: stead.Run) -> list[str]:
        first = await run.propose("next", model, [{"role": "user", "content": "turn 1"}],
                                  reason="start the refund")
        await (await run.wait("confirmation", token=False))
        second = await run.propose("next", model, [{"role": "user", "content": "turn 2"}],
                                   reason="after the confirmation")
        return [first.text, second.text]

    client = stead.Client(fstore, app)
    info = await client.start(loop, intent=stead.Intent(goal="refund order 123"))
    await stead.Worker(app, fstore).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    service["version"] = "refunds@2"  # the policy changes during the wait
    await client.deliver(info.run_id, kind="confirmation", event_id="c1", payload={})
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == ["check eligibility", "send refund"]
    assert len(model.calls) == 2  # the plan acted on (a wait followed) is history
    last = (await client.resumes(info.run_id))[-1].details.intent or {}
    assert last["diff"]["policy_version"] == ["refunds@1", "refunds@2"]
    assert last["action"]["name"] == "next" and last["action"]["reason"] == \
        "after the confirmation"
    assert last["decision"]["decision"] == "continue"


async def test_the_proposal_not_acted_on_is_asked_again_with_what_holds_now(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    service = {"version": "p@1"}
    crashes = Calls()
    model = stead.ScriptedModel(["plan-1", "plan-2"])
    app = stead.App("loop")

    @app.policy(version="p")
    def judge(*_: Any) -> stead.Continue:
        return stead.Continue(version=service["version"])

    @app.workflow()
    async def loop(run: stead.Run) -> str:
        plan = await run.propose("next", model, [{"role": "user", "content": "go"}])
        await run.step("think", lambda: _crash_once(crashes, "think"))
        return plan.text

    client = stead.Client(fstore, app)
    info = await client.start(loop, intent=stead.Intent(goal="refund order 123"))
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=LEASE)).run_until_idle()
    service["version"] = "p@2"
    await _take_over(app, fstore, clock)
    assert await client.result(info.run_id, timeout=10) == "plan-2"
    told = model.calls[-1][-1]  # the system message the loop did not write
    assert told["role"] == "system" and "refund order 123" in told["content"]


# -- the policy judges the next step ----------------------------------------------------
async def test_the_takeover_asks_the_policy_about_the_pending_action_with_its_reason(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    actions: list[stead.Action | None] = []
    crashes = Calls()
    model = stead.ScriptedModel(["a", "b"])
    app = stead.App("loop")

    @app.policy(version="p@1")
    def judge(intent: stead.Intent | None, state: dict[str, Any], run: stead.RunRow,
              action: stead.Action | None) -> stead.Continue:
        actions.append(action)
        return stead.Continue()

    @app.workflow()
    async def loop(run: stead.Run) -> str:
        await run.llm("first", model, [{"role": "user", "content": "1"}])
        await run.step("crash", lambda: _crash_once(crashes, "x"))
        answer = await run.llm("second", model, [{"role": "user", "content": "2"}],
                               reason="summarise for the customer")
        return answer.text

    client = stead.Client(fstore, app)
    info = await client.start(loop)
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=LEASE)).run_until_idle()
    await _take_over(app, fstore, clock)
    assert await client.result(info.run_id, timeout=10) == "b"
    first, pending = actions
    assert first is not None and (first.kind, first.name) == ("llm", "first")  # the first claim
    assert pending is not None and (pending.kind, pending.name) == ("step", "crash")
    resumes = await client.resumes(info.run_id)
    assert [r.epoch for r in resumes] == [1, 2]  # the first claim is audited too
    assert (resumes[1].details.intent or {})["action"]["name"] == "crash"


async def test_policy_on_llm_asks_before_every_model_call_and_journals_the_decision(
    fstore: stead.Store,
) -> None:
    actions: list[stead.Action | None] = []
    model = stead.ScriptedModel(["a", "b"])
    app = stead.App("loop", policy_on=("effect", "llm"))

    @app.policy(version="p@1")
    def judge(intent: stead.Intent | None, state: dict[str, Any], run: stead.RunRow,
              action: stead.Action | None) -> stead.Continue | stead.Pause:
        actions.append(action)
        if action is not None and action.name == "second":
            return stead.Pause("a person reads this one",
                               intent=stead.Intent(goal="g", grants=[stead.Grant("t", {"x": 1})]))
        return stead.Continue()

    @app.workflow()
    async def loop(run: stead.Run) -> str:
        await run.llm("first", model, [{"role": "user", "content": "1"}], reason="why 1")
        answer = await run.llm("second", model, [{"role": "user", "content": "2"}],
                               reason="why 2")
        return answer.text

    client = stead.Client(fstore, app)
    info = await client.start(loop, intent=stead.Intent(goal="g", grants=[stead.Grant("t")]))
    await stead.Worker(app, fstore).run_until_idle()
    row = await client.get(info.run_id)
    assert row.status == "paused" and len(model.calls) == 1
    assert [(a.name, a.reason) for a in actions if a is not None] == [
        ("first", "why 1"), ("second", "why 2")]
    assert row.error["proposed_diff"]["grants"]["narrowed"][0]["to"] == {"x": 1}
    decisions = [r for r in await client.journal(info.run_id) if r.kind == "decision"]
    assert [r.name for r in decisions] == ["second"]
    assert '"pause"' in decisions[0].payload
    shown = stead.views.context_view.render(await client.intents(info.run_id),
                                   await client.resumes(info.run_id),
                                   await client.journal(info.run_id), 0.0)
    assert "before llm 'second' for 'why 2'" in shown and "proposes grants" in shown
    assert "epoch 1 (no change): continue" in shown  # the first claim's record


@pytest.mark.parametrize("first", ["effect", "step"])
async def test_one_operator_decision_clears_a_pause_for_good(
    fstore: stead.Store, first: str,
) -> None:
    sent: list[int] = []
    app = stead.App("loop")

    @app.policy(version="refunds@1")
    def judge(intent: stead.Intent | None, state: dict[str, Any], run: stead.RunRow,
              action: stead.Action | None) -> stead.Continue | stead.Pause:
        if action is not None and action.kind == "effect" and action.arguments["amount"] > 100:
            return stead.Pause("refunds over 100 need a person")
        return stead.Continue()

    @app.workflow()
    async def loop(run: stead.Run) -> int:
        if first == "step":  # the pause is then one before an effect, not the takeover's
            await run.step("look", lambda: "looked")
        await run.effect("refund", lambda op, amount: sent.append(amount), amount=150,
                         tool="refund")
        return len(sent)

    client = stead.Client(fstore, app)
    info = await client.start(loop, intent=stead.Intent(grants=[stead.Grant("refund")]))
    await stead.Worker(app, fstore).run_until_idle()
    assert (await client.get(info.run_id)).status == "paused"
    await client.resume(info.run_id, by="ana", why="checked with the customer")
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == 1 and sent == [150]
    last = (await client.resumes(info.run_id))[-1].details.intent or {}
    assert last["decision"]["decision"] == "continue"
    assert "cleared by ana" in last["decision"]["reason"]
    assert not last["changed"]  # the decided intent version is not a change


async def test_the_refund_loop_proposes_each_step_and_acts_under_the_policy(
    fstore: stead.Store, tmp_path: Any, monkeypatch: Any,
) -> None:
    from stead.examples import policy_agent, services

    monkeypatch.setenv(services.ENV, str(tmp_path))
    services.RefundPolicy().set(5000, "refunds@7")
    app = policy_agent.app
    client = stead.Client(fstore, app)
    info = await client.start(policy_agent.refund_loop, "123", 100, task_id="order-123",
                              intent=policy_agent.intent(5000, "refunds@7"))
    await stead.Worker(app, fstore).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    await client.deliver(info.run_id, kind="approval", event_id="ok", bind={"order_id": "123"},
                         payload={"approved": True})
    await stead.Worker(app, fstore).run_until_idle()
    result = await client.result(info.run_id, timeout=10)
    assert result["refunded"] is True
    facts = await client.task_state("order-123")
    assert facts.data == {"confirmed": True, "refunded": True}
    names = [r.name for r in await client.journal(info.run_id) if r.kind == "llm"]
    assert names == ["next", "next"]


# -- the takeover's audit ---------------------------------------------------------------
async def test_the_resume_record_says_what_was_done_with_each_effect(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    crashes = Calls()
    app = stead.App("audit")

    def pay(op: stead.Operation, amount: int) -> int:
        _crash_once(crashes, "pay")  # dies after the intent is journaled
        return amount

    @app.workflow()
    async def audited(run: stead.Run) -> int:
        facts = await run.state.get()
        await run.state.update({"step": 1}, expect_version=facts.version)
        await run.effect("mail", lambda op: "sent")
        return int(await run.effect("pay", pay, 5, idempotent=True))

    client = stead.Client(fstore, app)
    info = await client.start(audited, intent=stead.Intent(goal="pay"))
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=LEASE)).run_until_idle()
    await _take_over(app, fstore, clock)
    assert await client.result(info.run_id, timeout=10) == 5
    last = (await client.resumes(info.run_id))[-1]
    done = [(e["name"], e["done"]) for e in last.details.effects or ()]
    assert done == [("mail", "reused"), ("pay", "resent")]
    assert (last.details.effects or [])[1]["key"]
    assert (last.details.intent or {})["snapshot"]["world"]["version"] == 1
    assert not (last.details.intent or {})["changed"]  # its own state write is no change
    shown = stead.views.timeline.render_run(await client.get(info.run_id),
                                      await client.journal(info.run_id),
                                      await client.resumes(info.run_id))
    assert "on task state v1" in shown and "effects: mail reused; pay resent (key" in shown


def test_policy_on_names_known_points_only() -> None:
    assert stead.App("a", policy_on=("llm",)).policy_on == {"effect", "llm"}
    for bad in (("email",), "llm"):
        with pytest.raises(ValueError, match="policy_on"):
            stead.App("a", policy_on=bad)


# -- in real worker processes -----------------------------------------------------------
LOOP_WORKER = Path(__file__).with_name("workers") / "loop_worker.py"


def _loop_worker(db_url: str, log: Path, *extra: str) -> int:
    proc = subprocess.run(
        [sys.executable, str(LOOP_WORKER), "--db", db_url, "--log", str(log), *extra],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
        capture_output=True, timeout=120)
    assert proc.returncode in (0, KILLED), proc.stdout.decode() + proc.stderr.decode()
    return proc.returncode


@pytest.mark.slow
@pytest.mark.parametrize("crash", ["--crash-after=next:1", "--crash-after=send:2",
                                   "--crash-before=update:2"])
async def test_a_sigkilled_loop_re_asks_no_model_and_never_pauses(
    db_url: str, tmp_path: Path, crash: str,
) -> None:
    from tests.workers import loop_worker

    store = await stead.open_store(db_url)
    try:
        client = stead.Client(store, loop_worker.app)
        info = await client.start(loop_worker.loop, 2, intent=loop_worker.intent())
        log = tmp_path / "outside.log"
        assert _loop_worker(db_url, log, crash) == KILLED
        assert _loop_worker(db_url, log) == 0
        assert await client.result(info.run_id, timeout=30) == ["refund 0", "refund 1"]
        assert log.read_text().splitlines() == [
            "model 0", "send refund 0", "model 1", "send refund 1"]  # each once, in order
        resumes = await client.resumes(info.run_id)
        assert [r.epoch for r in resumes] == [1, 2]
        for r in resumes:
            revalidated = r.details.intent or {}
            assert not revalidated["changed"], revalidated
            assert revalidated["decision"]["decision"] in ("continue", "not asked")
            assert "budget" in revalidated["diff"]  # reported, not a change
    finally:
        await store.close()
