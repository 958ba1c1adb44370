"""Changes made to a run from outside its worker, while it runs, waits or is
paused: its intent revised (`Client.revise`, `stead runs revise`, the
operator's `revise`), its task's state set by compare-and-set
(`Client.set_state`, `stead state set`); and ended runs refuse them."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import stead
from stead import operator
from stead.cli import main
from stead.client import revisions
from stead.web import create_app
from stead.workflow import state
from tests import stress
from tests.helpers import Gate

HOUR = 3600.0
ME = os.environ.get("USER") or getpass.getuser()


def _intent(max_amount: int = 5000) -> stead.Intent:
    return stead.Intent(goal="refund order 123", instructions="refund once",
                        grants=[stead.Grant("dispatch_refund",
                                            {"order_id": "123", "max_amount": max_amount},
                                            expires_in=2 * HOUR)])


class Seen:
    """A policy that lets everything through and keeps what it was shown."""

    def __init__(self) -> None:
        self.goals: list[str] = []
        self.instructions: list[str | None] = []

    def __call__(self, intent: stead.Intent | None, *_: Any) -> stead.Continue:
        if intent is not None:
            self.goals.append(intent.goal)
            self.instructions.append(intent.instructions_sha256)
        return stead.Continue()


def _app(policy: Seen, ledger: list[int], gate: Gate | None = None) -> stead.App:
    app = stead.App("shop", policy=policy, policy_version="refunds@7")

    def dispatch(op: stead.Operation, order_id: str, amount: int) -> str:
        ledger.append(amount)
        return "rf-123"

    @app.workflow()
    async def refund(run: stead.Run, amount: int) -> Any:
        if gate is not None:
            await run.step("plan", gate.step)
        else:
            await (await run.wait("approval", token=False))
        facts = await run.state.get()
        sent = await run.effect("dispatch_refund", dispatch, order_id="123", amount=amount,
                                tool="dispatch_refund")
        return {"sent": sent, "facts": facts.data, "version": facts.version}

    return app


# -- revising the intent ------------------------------------------------------------------
async def test_a_waiting_run_is_revised_and_its_next_resume_judges_against_it(
    store: stead.Store,
) -> None:
    policy, ledger = Seen(), []
    app = _app(policy, ledger)
    client = stead.Client(store, app)
    info = await client.start("refund", 1000, intent=_intent())
    await stead.Worker(app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"

    row = await client.revise(info.run_id, by="ops@shop", why="the customer changed it",
                              goal="refund order 123, half of it", instructions="refund half")
    assert (row.version, row.author, row.why) == (2, "ops@shop",
                                                  "revised: the customer changed it")
    assert (await client.get(info.run_id)).status == "waiting"  # it still waits
    await client.deliver(info.run_id, kind="approval", event_id="ok", payload={})
    await stead.Worker(app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == "completed"
    assert policy.goals[-1] == "refund order 123, half of it"
    assert policy.instructions[-1] == stead.Intent(instructions="refund half").instructions_sha256
    revalidation = (await client.resumes(info.run_id))[-1].details.intent
    assert revalidation is not None
    assert revalidation["diff"]["intent_version"] == [1, 2]
    assert "goal_sha256" in revalidation["diff"] and "instructions_sha256" in revalidation["diff"]


async def test_a_running_run_is_checked_against_a_narrowed_grant_at_once(
    store: stead.Store,
) -> None:
    policy, ledger, gate = Seen(), [], Gate()
    app = _app(policy, ledger, gate)
    client = stead.Client(store, app)
    info = await client.start("refund", 1000, intent=_intent())
    worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01))
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(gate.reached.wait(), 30)
        assert (await client.get(info.run_id)).status == "running"
        narrowed = stead.Grant("dispatch_refund", {"order_id": "123", "max_amount": 500},
                               expires_in=HOUR)
        await client.revise(info.run_id, by="ops@shop", why="the limit is 500 now",
                            grants=[narrowed])
        gate.open.set()
        await client.wait_for(info.run_id, "paused", timeout=30)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert ledger == []  # the holder's effect was judged against the new version
    paused = await client.get(info.run_id)
    assert paused.error is not None and "dispatch_refund" in paused.error["message"]


@pytest.mark.parametrize("grants, says", [
    ([stead.Grant("dispatch_refund", {"order_id": "123", "max_amount": 9000})], "max_amount"),
    ([stead.Grant("dispatch_refund", {"max_amount": 10})], "drops order_id"),
    ([stead.Grant("dispatch_refund", {"order_id": "123", "max_amount": 10},
                  expires_in=9 * HOUR)], "later expiry"),
    ([stead.Grant("send_money", {})], "holds no grant for 'send_money'"),
])
async def test_a_revision_may_narrow_grants_never_widen_them(
    store: stead.Store, grants: list[stead.Grant], says: str,
) -> None:
    client = stead.Client(store)
    info = await client.start("refund", 1000, version=1, intent=_intent())
    with pytest.raises(stead.GrantWidening, match=says):
        await client.revise(info.run_id, by="ops", why="more", grants=grants)
    assert [v.version for v in await client.intents(info.run_id)] == [1]
    withdrawn = await client.revise(info.run_id, by="ops", why="no refunds", grants=[])
    assert stead.Intent.loads(withdrawn.intent).grants == ()


_SCOPES = st.fixed_dictionaries({}, optional={
    "order_id": st.sampled_from(["123", "124"]),
    "max_amount": st.integers(0, 10),
    "min_amount": st.integers(0, 10),
})
_CALLS = st.lists(st.fixed_dictionaries({"order_id": st.sampled_from(["123", "124"]),
                                         "amount": st.integers(-1, 11)}), max_size=20)


@settings(max_examples=stress.examples(300), deadline=None)
@given(before=_SCOPES, after=_SCOPES, expiries=st.tuples(
    st.one_of(st.none(), st.floats(0, 100)), st.one_of(st.none(), st.floats(0, 100))),
    calls=_CALLS)
def test_a_revised_grant_never_covers_a_call_its_predecessor_refused(
    before: dict[str, Any], after: dict[str, Any], expiries: tuple[float | None, float | None],
    calls: list[dict[str, Any]],
) -> None:
    held = stead.Grant("t", before, expires_at=expiries[0])
    run = stead.records.RunRow("r", "w", 1, None, "waiting", "[]", None, None, 1, None, None,
                               0.0, 0.0, None, intent_version=1)
    current = stead.records.IntentRow("r", 1, stead.Intent(grants=[held]).dumps(), "a", "w", 0)
    revision = revisions.Revision(grants=[stead.Grant("t", after, expires_at=expiries[1])])
    try:
        text = revision.apply(current, run, now=0.0)
    except stead.GrantWidening:
        return
    [revised] = stead.Intent.loads(text).grants
    for args in calls:
        assert held.covers(args) is None or revised.covers(args) is not None
    assert revised.expires_at is None or held.expires_at is None \
        or revised.expires_at <= held.expires_at
    assert held.expires_at is None or revised.expires_at is not None


async def test_a_revision_changes_something_and_needs_an_intent(store: stead.Store) -> None:
    client = stead.Client(store)
    bare = await client.start("refund", 1000, version=1)
    with pytest.raises(stead.InvalidIntent, match="has no intent to revise"):
        await client.revise(bare.run_id, why="w", goal="g")
    with pytest.raises(stead.InvalidIntent, match="changes something"):
        await client.revise(bare.run_id, why="w")
    with pytest.raises(stead.InvalidInput, match="who"):
        await client.revise(bare.run_id, by=" ", why="w", goal="g")


async def test_ended_runs_refuse_revisions_renewals_and_denials(store: stead.Store) -> None:
    client = stead.Client(store)
    info = await client.start("refund", 1000, version=1, intent=_intent())
    ended = await client.cancel(info.run_id)
    assert ended.status == "cancelled"
    for attempt in (
        client.revise(info.run_id, by="ops", why="w", goal="g"),
        client.renew_grant(info.run_id, "dispatch_refund", by="ops", why="w", expires_in=60),
        client.deny_grant(info.run_id, "dispatch_refund", by="ops", why="w"),
    ):
        with pytest.raises(stead.RunEnded, match="it has ended"):
            await attempt
    assert [v.version for v in await client.intents(info.run_id)] == [1]


async def test_a_decision_without_by_is_recorded_by_the_os_user(store: stead.Store) -> None:
    client = stead.Client(store)
    info = await client.start("refund", 1000, version=1, intent=_intent())
    await client.renew_grant(info.run_id, "dispatch_refund", why="a day more", expires_in=60)
    await client.deny_grant(info.run_id, "dispatch_refund", why="no refunds")
    authors = [v.author for v in await client.intents(info.run_id)]
    assert authors == [ME, ME, ME]
    with pytest.raises(stead.InvalidInput, match="why"):
        await client.deny_grant(info.run_id, "dispatch_refund", why=" ")


async def test_the_operator_revises_a_waiting_run(store: stead.Store) -> None:
    policy, ledger = Seen(), []
    app = _app(policy, ledger)
    client = stead.Client(store, app)
    info = await client.start("refund", 1000, intent=_intent())
    await stead.Worker(app, store).run_until_idle()
    s = await operator.situation(client, info.run_id)
    assert ("revise", "") in [(a.name, t) for a, t in operator.offered(s)]
    done = await operator.act(client, "revise", operator.Decision(
        info.run_id, "", {"goal": "refund half"}, by="alice", why="asked by phone"))
    assert "version 2" in done.message
    [*_, last] = await client.intents(info.run_id)
    assert (last.author, stead.Intent.loads(last.intent).goal) == ("alice", "refund half")
    bare = await client.start("refund", 1, version=1)
    assert "revise" not in [a.name for a, _ in operator.offered(
        await operator.situation(client, bare.run_id))]


# -- task state from outside --------------------------------------------------------------
async def test_task_state_is_set_from_outside_by_compare_and_set(store: stead.Store) -> None:
    client = stead.Client(store)
    first = await client.set_state("order-9", {"stock": 3}, expect_version=0,
                                   by="inventory", why="restocked")
    assert (first.version, first.data) == (1, {"stock": 3})
    with pytest.raises(stead.StateConflict, match="version 1, not 0"):
        await client.set_state("order-9", {"stock": 0}, expect_version=0, why="stale")
    second = await client.set_state("order-9", {"stock": None, "hold": True},
                                    expect_version=1, why="held")
    assert (second.version, second.data) == (2, {"hold": True})
    history = await client.state_history("order-9")
    assert [(h.version, h.author, h.why, h.run_id) for h in history] == [
        (2, ME, "held", None), (1, "inventory", "restocked", None)]
    with pytest.raises(stead.InvalidInput, match="expect_version"):
        await client.set_state("order-9", {}, expect_version=-1, why="w")


async def test_what_changed_the_world_since_a_version_is_read_from_the_store(
    store: stead.Store,
) -> None:
    client = stead.Client(store)
    await client.set_state("order-5", {"stock": 3, "hold": False}, expect_version=0,
                           by="inventory", why="counted")
    await client.set_state("order-5", {"stock": 2, "note": "x"}, expect_version=1,
                           by="support", why="one sold")
    since = await store.state_since("order-5", 1)
    assert [(r.version, r.author, r.why) for r in since] == [(2, "support", "one sold")]
    assert [r.version for r in await store.state_since("order-5", 0)] == [1, 2]
    at_one = await store.state_version("order-5", 1)
    assert at_one is not None and (at_one.author, at_one.run_id) == ("inventory", None)
    before, now = stead.Facts.from_row(at_one), await client.task_state("order-5")
    assert state.changed_keys(before, now) == ["note", "stock"]
    assert state.changed_keys(now, now) == []


async def test_a_waiting_run_sees_a_state_set_from_outside_when_it_resumes(
    store: stead.Store,
) -> None:
    policy, ledger = Seen(), []
    app = _app(policy, ledger)
    client = stead.Client(store, app)
    info = await client.start("refund", 1000, task_id="order-123", intent=_intent())
    await stead.Worker(app, store).run_until_idle()
    await client.set_state("order-123", {"confirmed": True}, expect_version=0,
                           by="support", why="the customer confirmed by phone")
    await client.deliver(info.run_id, kind="approval", event_id="ok", payload={})
    await stead.Worker(app, store).run_until_idle()
    done = await client.get(info.run_id)
    assert done.result == {"sent": "rf-123", "facts": {"confirmed": True}, "version": 1}


async def test_the_dashboard_shows_who_changed_the_state_from_outside(
    store: stead.Store,
) -> None:
    client = stead.Client(store)
    info = await client.start("refund", 1000, version=1, task_id="order-77")
    await client.set_state("order-77", {"stock": 1}, expect_version=0, by="inventory",
                           why="<b>recount</b>")
    asgi = create_app(stead.App("ui-only"), store=store, token="t" * 32, public=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://127.0.0.1:8484") as http:
        page = await http.get(f"/runs/{info.run_id}?tab=workspace")
    assert page.status_code == 200
    assert "inventory: &lt;b&gt;recount&lt;/b&gt;" in page.text


# -- the command line ---------------------------------------------------------------------
def _cli(db: str, *args: str) -> Any:
    return CliRunner().invoke(main, ["--db", db, *args])


async def _started(db: str, intent: stead.Intent | None) -> str:
    store = await stead.open_store(db)
    try:
        return (await stead.Client(store).start("refund", 1000, version=1,
                                                task_id="order-1", intent=intent)).run_id
    finally:
        await store.close()


async def _read(db: str, fn: Any) -> Any:
    store = await stead.open_store(db)
    try:
        return await fn(stead.Client(store))
    finally:
        await store.close()


async def test_the_cli_revises_a_run_and_sets_a_task_state(db_url: str, tmp_path: Path) -> None:
    run_id = await _started(db_url, _intent())
    text = tmp_path / "instructions.txt"
    text.write_text("refund half, once")
    grants = json.dumps([{"tool": "dispatch_refund",
                          "scope": {"order_id": "123", "max_amount": 100}}])
    ok = await asyncio.to_thread(_cli, db_url, "runs", "revise", run_id, "--goal", "half",
                                 "--instructions-file", str(text), "--why", "asked")
    assert ok.exit_code == 0 and "version 2" in ok.output and f"by {ME}" in ok.output, ok.output
    wide = await asyncio.to_thread(_cli, db_url, "runs", "revise", run_id, "--grants",
                                   json.dumps([{"tool": "other", "scope": {}}]), "--why", "w")
    assert wide.exit_code == 1 and "holds no grant for 'other'" in wide.output
    narrow = await asyncio.to_thread(_cli, db_url, "runs", "revise", run_id, "--grants",
                                     grants, "--by", "ops", "--why", "limit")
    assert narrow.exit_code == 0, narrow.output
    versions = await _read(db_url, lambda c: c.intents(run_id))
    assert [(v.version, v.author) for v in versions] == [(1, ME), (2, ME), (3, "ops")]

    set_ = await asyncio.to_thread(_cli, db_url, "state", "set", "order-1", "--expect-version",
                                   "0", "--patch", '{"stock": 2}', "--why", "recount")
    assert set_.exit_code == 0 and "version 1" in set_.output, set_.output
    stale = await asyncio.to_thread(_cli, db_url, "state", "set", "order-1",
                                    "--expect-version", "0", "--patch", "{}", "--why", "w")
    assert stale.exit_code == 1 and "not 0" in stale.output
    shown = await asyncio.to_thread(_cli, db_url, "state", "show", "order-1", "--json")
    data = json.loads(shown.output)
    assert data["version"] == 1 and data["data"] == {"stock": 2}
    assert data["history"][0]["by"] == ME and data["history"][0]["why"] == "recount"


async def test_intent_v1_from_the_cli_is_recorded_by_the_os_user(
    db_url: str, tmp_path: Path,
) -> None:
    path = tmp_path / "intent.json"
    path.write_text(json.dumps(_intent().to_json()))
    started = await asyncio.to_thread(_cli, db_url, "start", "tests.test_intent:cli_app",
                                      "noop", "--intent", str(path), "-q")
    assert started.exit_code == 0, started.output
    [first] = await _read(db_url, lambda c: c.intents(started.output.strip()))
    assert first.author == ME


async def test_the_cli_refuses_to_renew_a_grant_of_an_ended_run(db_url: str) -> None:
    run_id = await _started(db_url, _intent())
    await _read(db_url, lambda c: c.cancel(run_id))
    renewed = await asyncio.to_thread(_cli, db_url, "grants", "renew", run_id,
                                      "dispatch_refund", "--expires-in", "60", "--why", "w")
    assert renewed.exit_code == 1 and "it has ended" in renewed.output, renewed.output
    assert len([x for x in renewed.output.splitlines() if x.startswith("Error:")]) == 1
    assert len(await _read(db_url, lambda c: c.intents(run_id))) == 1


def test_bad_input_exits_1_with_one_error_line_whoever_finds_it(
    tmp_path: Path, sqlite_url: str,
) -> None:
    bad = tmp_path / "intent.json"
    unknown_tool = tmp_path / "tool.json"
    unknown_tool.write_text(json.dumps({"goal": "g", "grants": [{"tool": "wire"}]}))
    start = ["start", "tests.test_intent:tools_app", "declares", '["pay"]', "--intent"]
    for args in ([*start, str(bad)], [*start, str(unknown_tool)],  # a file, then the app
                 ["runs", "ls", "--status", "bogus"], ["runs", "revise"], ["nosuch"]):
        bad.write_text("{not json")
        result = _cli(sqlite_url, *args)
        assert result.exit_code == 1, (args, result.output)
        assert len([x for x in result.output.splitlines() if x.startswith("Error:")]) == 1
        assert "Traceback" not in result.output
