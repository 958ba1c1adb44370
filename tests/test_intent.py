"""The decision context: intent, grants, budgets, and the policy asked at every
resume and before every effect's intent commits."""

from __future__ import annotations

import asyncio
import getpass
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import stead
from stead.cli import main
from stead.testing import DelegatingStore
from tests.helpers import Calls, Crash, crash_then_resume

HOUR = 3600.0


# -- the model ---------------------------------------------------------------------------
def test_an_intent_round_trips_as_json_and_keeps_only_the_hash_of_its_instructions() -> None:
    intent = stead.Intent(
        goal="refund order 123", instructions="be kind; never refund twice",
        plan_version="plan-2", reason="customer asked",
        grants=[stead.Grant("dispatch_refund", {"max_amount": 5000, "order_id": "123"},
                            policy="refunds@7", expires_at=1000.0)],
        budget=stead.Budget(model_calls=3, effects=2, spend=10.5),
    )
    stored = json.loads(intent.dumps())
    assert "instructions" not in stored
    assert stored["instructions_sha256"] == intent.instructions_sha256
    back = stead.Intent.loads(intent.dumps())
    assert back.instructions is None and back.instructions_sha256 == intent.instructions_sha256
    assert back.grants == intent.grants and back.budget == intent.budget
    assert back.dumps() == intent.dumps()
    kept = stead.Intent(goal="g", instructions="text", keep_instructions=True)
    assert stead.Intent.loads(kept.dumps()).instructions == "text"


def test_a_grant_covers_equalities_bounds_and_a_matcher() -> None:
    grant = stead.Grant("refund", {"order_id": "123", "max_amount": 5000, "min_amount": 1})
    assert grant.covers({"order_id": "123", "amount": 5000}) is None
    assert "above max_amount" in str(grant.covers({"order_id": "123", "amount": 5001}))
    assert "below min_amount" in str(grant.covers({"order_id": "123", "amount": 0}))
    assert "order_id" in str(grant.covers({"order_id": "124", "amount": 10}))
    matched = stead.Grant("refund", {"matcher": "eu_only"})
    matchers = {"eu_only": lambda args, scope: args.get("country") in {"FR", "DE"}}
    assert matched.covers({"country": "FR"}, matchers) is None
    assert "refused" in str(matched.covers({"country": "US"}, matchers))
    assert "not registered" in str(matched.covers({"country": "FR"}, {}))


@pytest.mark.parametrize(("data", "says"), [
    ({"goal": "g", "colour": "red"}, "unknown field"),
    ({"grants": [{"tool": "t", "scope": [1, 2]}]}, "JSON object"),
    ({"grants": [{"tool": "t", "scope": {"max_amount": "lots"}}]}, "must be a number"),
    ({"grants": [{"scope": {}}]}, "names its tool"),
    ({"budget": {"model_calls": -1}}, ">= 0"),
    ({"grants": [{"tool": "t", "expires_in": 5, "expires_at": 9}]}, "give one"),
])
def test_bad_intents_get_a_clear_error(data: dict[str, Any], says: str) -> None:
    with pytest.raises(stead.InvalidIntent, match=says):
        stead.Intent.from_json(data)


def test_a_scope_that_is_not_json_is_refused() -> None:
    with pytest.raises(stead.InvalidIntent, match="not JSON"):
        stead.Grant("t", {"when": object()})
    with pytest.raises(stead.InvalidIntent, match="not JSON"):
        stead.Grant("t", {"max_amount": math.inf})


# -- the seed story ----------------------------------------------------------------------
class PolicyService:
    """Stands in for the refund policy service: its limit and version change."""

    def __init__(self) -> None:
        self.limit, self.version = 5000, "refunds@7"
        self.terminate = False

    def __call__(self, intent: stead.Intent | None, state: dict[str, Any], run: Any,
                 action: stead.Action | None) -> stead.Continue | stead.Pause | stead.Terminate:
        grants = [] if intent is None else intent.grants_for("dispatch_refund")
        wide = [g for g in grants if g.scope.get("max_amount", math.inf) > self.limit]
        if wide:
            why = (f"the refund limit is now {self.limit} ({self.version}); the grant allows "
                   f"{wide[0].scope['max_amount']} ({wide[0].policy})")
            if self.terminate:
                return stead.Terminate(why, version=self.version)
            return stead.Pause(why, version=self.version)
        return stead.Continue(version=self.version)


def refund_app(service: PolicyService, ledger: list[int]) -> tuple[stead.App, Any]:
    app = stead.App("shop", policy=service)

    def dispatch(op: stead.Operation, order_id: str, amount: int) -> str:
        assert op.grant is not None and op.grant.tool == "dispatch_refund"
        ledger.append(amount)
        return f"rf-{order_id}"

    @app.workflow()
    async def refund(run: stead.Run, order_id: str, amount: int) -> str:
        approval = await run.wait("approval", token=False, expires_in=2 * HOUR)
        answer = await approval
        assert answer == {"approved": True}
        receipt: str = await run.effect("dispatch_refund", dispatch, order_id, amount,
                                        tool="dispatch_refund", reason="the customer approved")
        return receipt

    return app, refund


def refund_intent(max_amount: int, policy: str) -> stead.Intent:
    return stead.Intent(goal="refund order 123", plan_version="p1", grants=[
        stead.Grant("dispatch_refund", {"max_amount": max_amount, "order_id": "123"},
                    policy=policy, expires_in=4 * HOUR)])


async def _approve(client: stead.Client, run_id: str) -> None:
    verdict = await client.deliver(run_id, kind="approval", event_id="ok-1",
                                   payload={"approved": True})
    assert isinstance(verdict, stead.Accepted)


async def test_a_withdrawn_limit_pauses_the_refund_and_a_narrowed_grant_lets_it_through_once(
    fstore: stead.Store,
) -> None:
    service, ledger = PolicyService(), []
    app, refund = refund_app(service, ledger)
    client = stead.Client(fstore, app)
    info = await client.start(refund, "123", 1000, intent=refund_intent(5000, "refunds@7"))
    await stead.Worker(app, fstore).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"

    service.limit, service.version = 1000, "refunds@8"  # meanwhile, the policy changes
    await _approve(client, info.run_id)
    await stead.Worker(app, fstore).run_until_idle()  # a new worker takes the run over

    paused = await client.get(info.run_id)
    assert paused.status == stead.records.RunStatus.PAUSED
    assert "1000" in paused.error["message"] and "refunds@8" in paused.error["message"]
    revalidation = (await client.resumes(info.run_id))[-1].details.intent
    assert revalidation is not None
    assert revalidation["decision"]["decision"] == "pause"
    assert revalidation["diff"]["policy_version"] == ["refunds@7", "refunds@8"]
    assert ledger == []  # no refund sent

    await client.resume(info.run_id, by="ops@shop", why="limit is 1000 now",
                        intent=refund_intent(1000, "refunds@8"))
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == "rf-123"
    assert ledger == [1000]
    await stead.Worker(app, fstore).run_until_idle()
    assert ledger == [1000]  # once
    versions = await client.intents(info.run_id)
    starter = os.environ.get("USER") or getpass.getuser()  # intent v1: who started it
    assert [(v.version, v.author) for v in versions] == [(1, starter), (2, "ops@shop")]
    last = (await client.resumes(info.run_id))[-1].details.intent
    assert last is not None and last["decision"]["decision"] == "continue"
    assert last["diff"]["grants"]["narrowed"][0]["to"]["max_amount"] == 1000


async def test_a_policy_that_terminates_ends_the_run_as_revalidation_failed(
    fstore: stead.Store,
) -> None:
    service, ledger = PolicyService(), []
    app, refund = refund_app(service, ledger)
    client = stead.Client(fstore, app)
    info = await client.start(refund, "123", 1000, intent=refund_intent(5000, "refunds@7"))
    await stead.Worker(app, fstore).run_until_idle()
    service.limit, service.version, service.terminate = 1000, "refunds@8", True
    await _approve(client, info.run_id)
    await stead.Worker(app, fstore).run_until_idle()
    ended = await client.get(info.run_id)
    assert ended.status == "revalidation_failed" and ended.done
    assert ledger == []
    assert (await client.resumes(info.run_id))[-1].details.intent is not None
    await stead.Worker(app, fstore).run_until_idle()
    assert (await client.get(info.run_id)).status == "revalidation_failed"  # never retried


async def test_a_policy_that_raises_pauses_the_run(fstore: stead.Store) -> None:
    ledger: list[int] = []

    def broken(*_: Any) -> stead.Continue:
        raise RuntimeError("policy service down")

    app, refund = refund_app(PolicyService(), ledger)
    app.policy(version="v9")(broken)
    client = stead.Client(fstore, app)
    info = await client.start(refund, "123", 1000, intent=refund_intent(5000, "refunds@7"))
    await stead.Worker(app, fstore).run_until_idle()
    row = await client.get(info.run_id)
    assert row.status == "paused" and "policy service down" in row.error["message"]
    assert ledger == []


# -- grants ------------------------------------------------------------------------------
def plain_refund_app(ledger: list[int]) -> tuple[stead.App, Any]:
    app = stead.App("shop")

    def dispatch(op: stead.Operation, order_id: str, amount: int) -> int:
        ledger.append(amount)
        return amount

    @app.workflow()
    async def refund(run: stead.Run, order_id: str, amount: int) -> int:
        await (await run.wait("approval", token=False))
        sent: int = await run.effect("dispatch_refund", dispatch, order_id, amount=amount,
                                     tool="dispatch_refund")
        return sent

    return app, refund


async def test_a_grant_that_expires_during_a_wait_pauses_and_a_renewal_may_only_narrow(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    ledger: list[int] = []
    app, refund = plain_refund_app(ledger)
    client = stead.Client(fstore, app)
    intent = stead.Intent(goal="refund", grants=[
        stead.Grant("dispatch_refund", {"max_amount": 5000}, expires_in=60)])
    info = await client.start(refund, "123", 1000, intent=intent)
    await stead.Worker(app, fstore).run_until_idle()
    clock.advance(120)  # the grant expires while the run waits
    await _approve(client, info.run_id)
    await stead.Worker(app, fstore).run_until_idle()
    row = await client.get(info.run_id)
    assert row.status == "paused" and "expired" in row.error["message"]
    assert row.error["cause"] == "grant" and ledger == []

    with pytest.raises(stead.GrantWidening, match="max_amount 5000"):
        await client.renew_grant(info.run_id, "dispatch_refund", expires_in=HOUR,
                                 scope={"max_amount": 9000}, by="ops", why="more")
    assert (await client.get(info.run_id)).status == "paused"  # nothing changed
    renewed = await client.renew_grant(info.run_id, "dispatch_refund", expires_in=HOUR,
                                       scope={"max_amount": 500}, by="ops", why="narrower")
    assert renewed.status == "running"
    await stead.Worker(app, fstore).run_until_idle()
    row = await client.get(info.run_id)  # 1000 is outside the narrowed scope
    assert row.status == "paused" and "above max_amount=500" in row.error["message"]
    assert ledger == []

    await client.renew_grant(info.run_id, "dispatch_refund", expires_in=HOUR,
                             scope={"max_amount": 1000}, widen=True, by="ops", why="approved")
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == 1000
    assert ledger == [1000]


async def test_after_its_last_grant_expired_no_effect_of_the_run_acts(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    mails: list[str] = []
    app = stead.App("shop")

    def mail(op: stead.Operation, to: str) -> str:
        mails.append(to)
        return to

    @app.workflow()
    async def notify(run: stead.Run) -> str:
        await (await run.wait("go", token=False))
        sent: str = await run.effect("mail", mail, "customer@example.com")  # names no tool
        return sent

    client = stead.Client(fstore, app)
    info = await client.start(notify, intent=stead.Intent(goal="notify", grants=[
        stead.Grant("dispatch_refund", {}, expires_in=60)]))
    await stead.Worker(app, fstore).run_until_idle()
    clock.advance(120)  # the run's only grant expires while it waits
    await client.deliver(info.run_id, kind="go", event_id="go-1", payload={})
    await stead.Worker(app, fstore).run_until_idle()
    row = await client.get(info.run_id)
    assert row.status == "paused" and row.error is not None
    assert row.error["cause"] == "grants" and "nothing acts" in row.error["message"]
    assert mails == []


async def test_an_effect_with_a_tool_and_no_grant_pauses_and_a_denial_terminates(
    fstore: stead.Store,
) -> None:
    ledger: list[int] = []
    app, refund = plain_refund_app(ledger)
    client = stead.Client(fstore, app)
    info = await client.start(refund, "123", 10, intent=stead.Intent(goal="refund", grants=[
        stead.Grant("dispatch_refund", {"max_amount": 5})]))
    await stead.Worker(app, fstore).run_until_idle()
    await _approve(client, info.run_id)
    await stead.Worker(app, fstore).run_until_idle()
    assert (await client.get(info.run_id)).status == "paused"
    with pytest.raises(stead.InvalidIntent, match="no grant for tool 'send_mail'"):
        await client.renew_grant(info.run_id, "send_mail", expires_in=60, by="ops", why="x")
    denied = await client.deny_grant(info.run_id, "dispatch_refund", by="ops", why="fraud")
    assert denied.status == "revalidation_failed" and ledger == []
    with pytest.raises(stead.NotStopped):
        await client.resume(info.run_id, by="ops", why="oops")


# -- budgets -----------------------------------------------------------------------------
async def test_a_budget_of_three_model_calls_holds_across_two_takeovers(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    model = stead.ScriptedModel(["a", "b", "c", "d"])
    crashes = Calls()
    app = stead.App("agent")

    def crash_once(name: str) -> str:
        if not crashes[name]:
            crashes.hit(name)
            raise Crash()
        return name

    @app.workflow()
    async def agent(run: stead.Run) -> list[str]:
        said = []
        for i in range(4):
            answer = await run.llm(f"think-{i}", model, [{"role": "user", "content": str(i)}])
            said.append(answer.text)
            if i in (1, 2):
                await run.step(f"crash-{i}", crash_once, f"crash-{i}")
        return said

    client = stead.Client(fstore, app)
    info = await client.start(agent, intent=stead.Intent(
        goal="think", budget=stead.Budget(model_calls=3)))
    await crash_then_resume(app, fstore, clock)  # first takeover: a, b replayed; c live
    clock.advance(31)
    await stead.Worker(app, fstore).run_until_idle()  # second takeover: the 4th call pauses
    row = await client.get(info.run_id)
    assert row.status == "paused", row.error
    assert row.error["cause"] == "budget" and "model_calls: 3 of 3" in row.error["message"]
    assert len(model.calls) == 3  # replayed calls were not asked (nor counted) again
    last = (await client.resumes(info.run_id))[-1].details.intent
    assert last is not None and last["diff"]["budget"]["left"] == {"model_calls": 0}

    await client.resume(info.run_id, by="ops", why="one more", intent=stead.Intent(
        goal="think", budget=stead.Budget(model_calls=4)))
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == ["a", "b", "c", "d"]


async def test_spend_and_effect_budgets_pause_before_the_effect(fstore: stead.Store) -> None:
    sent: list[float] = []
    app = stead.App("shop")

    @app.workflow()
    async def pay(run: stead.Run) -> None:
        for cost in (4.0, 4.0, 4.0):
            await run.effect("pay", lambda op, c: sent.append(c), cost, cost=cost)

    client = stead.Client(fstore, app)
    info = await client.start(pay, intent=stead.Intent(goal="pay",
                                                       budget=stead.Budget(spend=10)))
    await stead.Worker(app, fstore).run_until_idle()
    row = await client.get(info.run_id)
    assert row.status == "paused" and "spend" in row.error["message"]
    assert sent == [4.0, 4.0]


# -- declared by the workflow --------------------------------------------------------------
async def test_run_intent_is_journaled_and_a_replay_adds_no_version(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    crashed = Calls()
    app = stead.App("agent")

    def crash_once() -> None:
        if not crashed["x"]:
            crashed.hit("x")
            raise Crash()

    @app.workflow()
    async def plan(run: stead.Run) -> int:
        version = await run.intent(stead.Intent(goal="plan b", plan_version="b"), why="replan")
        await run.step("crash", crash_once)
        return version

    client = stead.Client(fstore, app)
    info = await client.start(plan, intent=stead.Intent(goal="plan a"))
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id, timeout=10) == 2
    versions = await client.intents(info.run_id)
    assert [(v.version, v.why) for v in versions] == [(1, "given at start"), (2, "replan")]
    kinds = [r.kind for r in await client.journal(info.run_id)]
    assert kinds.count("intent") == 1


# -- the command line --------------------------------------------------------------------
def test_the_cli_refuses_a_malformed_intent_file(tmp_path: Path, sqlite_url: str) -> None:
    bad = tmp_path / "intent.json"
    runner = CliRunner()
    for text, says in [("{not json", "JSON"), ('{"goal": "g", "x": 1}', "unknown field"),
                       ('{"grants": [{"tool": "t", "scope": "all"}]}', "JSON object")]:
        bad.write_text(text)
        result = runner.invoke(main, ["--db", sqlite_url, "start", "tests.test_intent:cli_app",
                                      "noop", "--intent", str(bad)])
        assert result.exit_code != 0 and says in result.output, result.output
        assert "Traceback" not in result.output


cli_app = stead.App("cli")


@cli_app.workflow()
async def noop(run: stead.Run) -> int:
    await (await run.wait("go", token=False))
    return await run.effect("pay", lambda op, amount: amount, amount=7, tool="pay")


def test_the_cli_starts_with_an_intent_renews_resumes_and_shows_it(
    tmp_path: Path, sqlite_url: str,
) -> None:
    path = tmp_path / "intent.json"
    path.write_text(json.dumps({"goal": "pay 7", "instructions": "pay once",
                                "grants": [{"tool": "pay", "scope": {"max_amount": 5},
                                            "policy": "pay@1", "expires_in": 3600}]}))
    runner = CliRunner()

    def stead_cli(*args: str) -> str:
        result = runner.invoke(main, ["--db", sqlite_url, *args])
        assert result.exit_code == 0, result.output
        return result.output

    run_id = stead_cli("start", "tests.test_intent:cli_app", "noop", "--intent", str(path),
                       "-q").strip()
    shown = stead_cli("runs", "show", run_id)
    assert "intent v1: pay 7" in shown and "pay [pay@1]" in shown and "left" in shown

    import asyncio

    async def drive(run_id: str) -> str:
        store = await stead.open_store(sqlite_url)
        try:
            client = stead.Client(store, cli_app)
            await stead.Worker(cli_app, store).run_until_idle()
            await client.deliver(run_id, kind="go", event_id="e1", payload={})
            await stead.Worker(cli_app, store).run_until_idle()
            return (await client.get(run_id)).status
        finally:
            await store.close()

    assert asyncio.run(drive(run_id)) == "paused"
    refused = runner.invoke(main, ["--db", sqlite_url, "grants", "renew", run_id, "pay",
                                   "--scope", '{"max_amount": 9}', "--by", "me", "--why", "x"])
    assert refused.exit_code != 0 and "widen" in refused.output
    stead_cli("grants", "renew", run_id, "pay", "--scope", '{"max_amount": 9}', "--widen",
              "--expires-in", "60", "--by", "me", "--why", "approved")
    assert asyncio.run(drive(run_id)) == "completed"
    shown = stead_cli("runs", "show", run_id)
    assert "v2" in shown and "grant pay renewed (widened): approved" in shown
    assert "revalidations" in shown

    other = stead_cli("start", "tests.test_intent:cli_app", "noop", "--intent", str(path),
                      "-q").strip()
    assert asyncio.run(drive(other)) == "paused"
    stead_cli("runs", "resume", other, "--by", "me", "--why", "try again")
    assert asyncio.run(drive(other)) == "paused"  # the same grant still does not cover it
    assert "terminated" in stead_cli("runs", "terminate", other, "--by", "me", "--why", "no")
    assert asyncio.run(drive(other)) == "revalidation_failed"


async def test_a_budget_the_workflow_declares_counts_what_it_already_spent(
    fstore: stead.Store,
) -> None:
    model = stead.ScriptedModel(["a", "b"])
    app = stead.App("agent")

    @app.workflow()
    async def agent(run: stead.Run) -> str:
        await run.llm("first", model, [{"role": "user", "content": "1"}])
        await run.intent(stead.Intent(goal="frugal", budget=stead.Budget(model_calls=1)))
        return (await run.llm("second", model, [{"role": "user", "content": "2"}])).text

    client = stead.Client(fstore, app)
    info = await client.start(agent)
    await stead.Worker(app, fstore).run_until_idle()
    row = await client.get(info.run_id)
    assert row.status == "paused" and "model_calls: 1 of 1" in row.error["message"]
    assert len(model.calls) == 1


def test_instructions_in_an_intent_file_are_kept_only_as_a_hash_unless_asked() -> None:
    given = stead.Intent.from_json({"goal": "g", "instructions": "secret plan"})
    assert "secret plan" not in given.dumps()
    kept = stead.Intent.from_json({"goal": "g", "instructions": "plan",
                                   "keep_instructions": True})
    assert json.loads(kept.dumps())["instructions"] == "plan"
    assert stead.Intent.loads(kept.dumps()).instructions == "plan"


async def test_a_paused_run_is_not_retried_but_resumed(fstore: stead.Store) -> None:
    ledger: list[int] = []
    app, refund = plain_refund_app(ledger)
    client = stead.Client(fstore, app)
    info = await client.start(refund, "123", 10)
    await stead.Worker(app, fstore).run_until_idle()
    await _approve(client, info.run_id)
    await stead.Worker(app, fstore).run_until_idle()
    assert (await client.get(info.run_id)).status == "paused"  # no intent: no grant
    with pytest.raises(stead.NotStopped, match="stead runs resume"):
        await client.retry(info.run_id)


async def test_a_run_without_intent_or_policy_reads_nothing_more(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    asked: list[str] = []

    class Watching(DelegatingStore):
        async def load_journal(self, run_id: str) -> Any:
            asked.append("load_journal")
            return await self.inner.load_journal(run_id)

        async def takeover_context(self, run_id: str, *, journal: bool, task_key: str,
                                   revalidate: bool) -> Any:
            asked.append(f"takeover_context(journal={journal}, revalidate={revalidate})")
            return await self.inner.takeover_context(run_id, journal=journal,
                                                     task_key=task_key, revalidate=revalidate)

        async def latest_intent(self, run_id: str) -> Any:
            asked.append("latest_intent")
            return await self.inner.latest_intent(run_id)

        async def read_state(self, task_key: str) -> Any:
            asked.append("read_state")
            return await self.inner.read_state(task_key)

    app = stead.App("plain")
    crashed = Calls()

    def crash_once() -> int:
        if not crashed["x"]:
            crashed.hit("x")
            raise Crash()
        return 1

    @app.workflow()
    async def plain(run: stead.Run) -> int:
        await run.effect("send", lambda op: 1)
        return int(await run.step("crash", crash_once))

    store = Watching(fstore)
    client = stead.Client(store, app)
    info = await client.start(plain)
    await crash_then_resume(app, store, clock)
    assert await client.result(info.run_id, timeout=10) == 1
    # The first claim reads nothing; the takeover reads the journal and the
    # task state (which its resume record names) in one read, and no intent.
    assert asked == ["takeover_context(journal=True, revalidate=False)"]
    [resume] = await client.resumes(info.run_id)
    assert resume.details.intent is None and resume.details.world == {"version": 0, "keys": {}}


async def test_every_resume_record_names_the_task_state_it_resumed_on(
    fstore: stead.Store, clock: stead.FakeClock, db_url: str,
) -> None:
    # The order-123 story without intent or policy: the record of the
    # takeover still says which version of the task's facts it went on from.
    app = stead.App("plain")
    crashed = Calls()

    def crash_once() -> str:
        if not crashed["x"]:
            crashed.hit("x")
            raise Crash()
        return "refunded"

    @app.workflow()
    async def refund(run: stead.Run) -> str:
        await run.state.update({"status": "awaiting_user_confirmation"}, expect_version=0)
        return str(await run.step("refund", crash_once))

    client = stead.Client(fstore, app)
    info = await client.start(refund, task_id="order-123")
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id, timeout=10) == "refunded"
    [resume] = await client.resumes(info.run_id)
    assert resume.details.intent is None
    assert (resume.details.world or {}).get("version") == 1
    assert set((resume.details.world or {}).get("keys") or {}) == {"status"}
    shown = await asyncio.to_thread(CliRunner().invoke, main,
                                    ["--db", db_url, "runs", "show", info.run_id])
    assert shown.exit_code == 0, shown.output
    [line] = [x for x in shown.output.splitlines() if x.strip().startswith("epoch 2")]
    assert "on task state v1" in line


# -- a takeover that stops still leaves its record ----------------------------------------
def test_a_takeover_that_stops_on_unusable_input_writes_its_resume_record(
    db_url: str,
) -> None:
    import asyncio

    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run, n: int) -> int:
        return n

    async def drive() -> tuple[str, list[stead.ResumeRecord]]:
        store = await stead.open_store(db_url)
        try:
            info = await stead.Client(store).start("wf", "seven", version=1)  # unchecked
            await stead.Worker(app, store).run_until_idle()
            client = stead.Client(store, app)
            assert (await client.get(info.run_id)).status == "incompatible_checkpoint"
            return info.run_id, await client.resumes(info.run_id)
        finally:
            await store.close()

    run_id, resumes = asyncio.run(drive())
    (resume,) = resumes
    assert (resume.epoch, resume.from_seq, resume.code_version) == (1, 0, "wf@1")
    decision = (resume.details.intent or {})["decision"]
    assert decision["decision"] == "stopped: incompatible_checkpoint"
    assert "seven" in decision["reason"]
    shown = CliRunner().invoke(main, ["--db", db_url, "runs", "show", run_id])
    assert shown.exit_code == 0, shown.output
    assert "epoch 1: stopped: incompatible_checkpoint" in shown.output
    assert "seven" in shown.output


# -- a model call's reason ------------------------------------------------------------------
async def test_a_model_calls_reason_is_journaled_with_it_and_not_sent_to_the_model(
    fstore: stead.Store,
) -> None:
    seen: list[dict[str, Any]] = []

    class Model(stead.ScriptedModel):
        async def complete(self, messages: Any, **params: Any) -> stead.Completion:
            seen.append(params)
            return await super().complete(messages, **params)

    model = Model(["plan: refund 1000"])
    app = stead.App("agent")

    @app.workflow()
    async def agent(run: stead.Run) -> str:
        done = await run.llm("plan", model, [{"role": "user", "content": "refund?"}],
                             reason="the customer asked for a refund", temperature=0)
        return done.text

    client = stead.Client(fstore, app)
    info = await client.start(agent)
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "plan: refund 1000"
    (rec,) = [r for r in await client.journal(info.run_id) if r.kind == "llm"]
    assert json.loads(rec.payload)["reason"] == "the customer asked for a refund"
    assert seen == [{"temperature": 0}]


# -- a wait bound to the policy version -----------------------------------------------------
async def test_a_wait_bound_to_a_policy_version_is_compared_with_the_apps_current_policy(
    fstore: stead.Store,
) -> None:
    def allow(*_: Any) -> stead.Continue:
        return stead.Continue()

    app = stead.App("shop", policy=allow, policy_version="refunds@7")

    @app.workflow()
    async def refund(run: stead.Run) -> str:
        w = await run.wait("approval", bind={"policy_version": "refunds@7"}, token=False)
        return str((await w)["ok"])

    info = await stead.Client(fstore, app).start(refund)
    await stead.Worker(app, fstore).run_until_idle()
    bound = {"policy_version": "refunds@7"}

    later = stead.App("shop", policy=allow, policy_version="refunds@8")
    changed = await stead.Client(fstore, later).deliver(
        info.run_id, kind="approval", event_id="e1", payload={"ok": True}, bind=bound)
    assert isinstance(changed, stead.Rejected) and changed.reason == "policy_changed"
    assert "refunds@7" in changed.detail and "refunds@8" in changed.detail
    withdrawn = await stead.Client(fstore, stead.App("shop")).deliver(
        info.run_id, kind="approval", event_id="e2", payload={"ok": True}, bind=bound)
    assert isinstance(withdrawn, stead.Rejected) and withdrawn.reason == "policy_changed"
    assert "now none" in withdrawn.detail

    # A client without an app compares the event with the wait's own copy only.
    appless = stead.Client(fstore)
    wrong = await appless.deliver(info.run_id, kind="approval", event_id="e3",
                                  payload={"ok": True}, bind={"policy_version": "refunds@8"})
    assert isinstance(wrong, stead.Rejected) and wrong.reason == "bound_value_mismatch"
    same = await appless.deliver(info.run_id, kind="approval", event_id="e4",
                                 payload={"ok": True}, bind=bound)
    assert isinstance(same, stead.Accepted)


# -- the app's tools ------------------------------------------------------------------------
tools_app = stead.App("tools", tools=["pay", "refund"])


@tools_app.workflow()
async def declares(run: stead.Run, tool: str) -> int:
    return await run.intent(stead.Intent(goal="g", grants=[stead.Grant(tool, {})]))


async def test_an_intent_granting_a_tool_the_app_does_not_know_is_refused(
    fstore: stead.Store,
) -> None:
    client = stead.Client(fstore, tools_app)
    unknown = stead.Intent(goal="g", grants=[stead.Grant("pay", {}), stead.Grant("wire", {})])
    says = r"tool 'wire'.*app 'tools' does not know \(its tools: pay, refund\)"
    with pytest.raises(stead.InvalidIntent, match=says):
        await client.start(declares, "pay", intent=unknown)
    assert await fstore.list_runs() == []

    # Started by a client that knows no tools: the app still refuses them later.
    info = await stead.Client(fstore).start("declares", "pay", version=1, intent=unknown)
    with pytest.raises(stead.InvalidIntent, match=says):
        await client.renew_grant(info.run_id, "wire", expires_in=60, by="me", why="x")
    with pytest.raises(stead.InvalidIntent, match=says):
        await client.resume(info.run_id, by="me", why="x", intent=unknown)
    assert len(await client.intents(info.run_id)) == 1

    # Declared by the workflow: the declaration fails, nothing is stored.
    known = await client.start(declares, "refund")
    wrong = await client.start(declares, "wire")
    await stead.Worker(tools_app, fstore).run_until_idle()
    assert await client.result(known.run_id, timeout=5) == 1
    failed = await client.get(wrong.run_id)
    assert failed.status == "failed" and failed.error is not None
    assert failed.error["type"] == "InvalidIntent" and "'wire'" in failed.error["message"]
    assert await client.intents(wrong.run_id) == []

    # An app that declares no tools checks none.
    loose = stead.App("loose")
    loose.workflow()(declares.fn)
    assert loose.tools is None
    await stead.Client(fstore, loose).start("declares", "wire", intent=unknown)


def test_the_cli_refuses_an_intent_file_granting_an_unknown_tool(
    tmp_path: Path, sqlite_url: str,
) -> None:
    path = tmp_path / "intent.json"
    path.write_text(json.dumps({"goal": "g", "grants": [{"tool": "wire", "scope": {}}]}))
    result = CliRunner().invoke(main, ["--db", sqlite_url, "start", "tests.test_intent:tools_app",
                                       "declares", '["pay"]', "--intent", str(path)])
    assert result.exit_code != 0 and "tool 'wire'" in result.output, result.output
    assert "its tools: pay, refund" in result.output and "Traceback" not in result.output
