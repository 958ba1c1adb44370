"""stead.operator on both stores: what needs a human, each action where it
applies (and refused where it does not), the audit of every attempt, and an
operator's delivery judged by the resume contract, token aside."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import stead
from stead import operator
from stead.operator import AttentionKind, Decision, attention
from stead.records import RunStatus
from tests import web_app
from tests.ops_app import cli
from tests.web_app import settle


def _d(run_id: str, target: str = "", why: str = "because", **values: str) -> Decision:
    return Decision(run_id=run_id, target=target, values=values, by="ops", why=why)


async def test_needs_a_human_lists_each_stop_and_every_open_approval_with_its_actions(
    store: stead.Store,
) -> None:
    client = stead.Client(store, web_app.app)
    unknown = await client.start("refund", "1")
    paused = await client.start("granted", "2", intent=web_app.expired_grant())
    expiring = await client.start("expiring", "T-1", task_id="ticket-T-1")
    lasting = await client.start("approval", "3")  # no expiry: listed all the same, last
    await settle(store)
    listed = await operator.needs_a_human(client)
    found = {a.run.run_id: a for a in listed}
    assert {a.kind for a in found.values()} == {
        AttentionKind.OUTCOME_UNKNOWN, AttentionKind.PAUSED, AttentionKind.APPROVAL}
    assert [a.run.run_id for a in listed][-2:] == [expiring.run_id, lasting.run_id]
    assert found[lasting.run_id].summary.endswith("no expiry")
    # The refund's effect has no check: a retry would only stop on it again.
    assert [a.name for a, _ in found[unknown.run_id].actions] == ["reconcile"]
    assert {a.name for a, _ in found[paused.run_id].actions} == {
        "resume", "terminate", "renew_grant", "deny_grant"}
    assert {a.name for a, _ in found[expiring.run_id].actions} == {
        "approve", "reject", "revoke_wait"}


async def test_each_action_applies_where_it_should_and_is_audited(store: stead.Store) -> None:
    client = stead.Client(store, web_app.app)
    paused = await client.start("granted", "2", intent=web_app.expired_grant())
    await settle(store)
    with pytest.raises(stead.GrantWidening):
        await operator.act(client, "renew_grant", _d(paused.run_id, "dispatch_refund",
                                                     expires_in="60", scope='{"order": "3"}'))
    with pytest.raises(stead.UnknownAction):
        await operator.act(client, "retry", _d(paused.run_id))
    with pytest.raises(stead.UnknownAction):
        await operator.act(client, "launch", _d(paused.run_id))
    with pytest.raises(stead.InvalidInput):
        await operator.act(client, "resume", _d(paused.run_id, why=" "))
    done = await operator.act(client, "deny_grant", _d(paused.run_id, "dispatch_refund"))
    assert "revalidation_failed" in done.message
    audit = await store.list_actions(paused.run_id)
    assert [(a.action, a.outcome) for a in audit] == [
        ("renew_grant", "refused"), ("retry", "refused"), ("deny_grant", "done")]

    waiting = await client.start("approval", "4")
    await settle(store)
    [wait] = await client.waits(run_id=waiting.run_id)
    done = await operator.act(client, "reject", _d(waiting.run_id, wait.wait_id,
                                                   reason="not this one"))
    assert done.message.startswith("Accepted")
    await settle(store)
    assert await client.result(waiting.run_id) == {
        "decision": {"approved": False, "reason": "not this one"}}

    live = await client.start("approval", "5")
    await operator.act(client, "cancel", _d(live.run_id), expect_status="pending")
    assert (await client.get(live.run_id)).status == RunStatus.CANCELLED
    with pytest.raises(stead.RunMovedOn, match="it is cancelled"):
        await operator.act(client, "cancel", _d(live.run_id), expect_status="pending")


async def test_an_operator_delivery_skips_only_the_token(store: stead.Store) -> None:
    client = stead.Client(store, web_app.app)
    info = await client.start("approval", "6")
    await settle(store)
    [wait] = await client.waits(run_id=info.run_id)
    who = stead.Operator("alice", "by phone")
    wrong = await client.deliver(info.run_id, event_id="o1", wait_id=wait.wait_id,
                                 bind={"order_id": "7"}, payload={}, operator=who)
    assert isinstance(wrong, stead.Rejected) and wrong.reason == "bound_value_mismatch"
    with pytest.raises(stead.InvalidInput):
        await client.deliver(info.run_id, event_id="o2", wait_id=wait.wait_id,
                             bind={"order_id": "6"}, token="stk_x", operator=who)
    with pytest.raises(stead.InvalidInput):
        stead.Operator("", "why")
    ok = await client.deliver(info.run_id, event_id="o3", wait_id=wait.wait_id,
                              bind={"order_id": "6"}, payload={"approved": True},
                              operator=who)
    assert isinstance(ok, stead.Accepted)
    stored = {e.event_id: e for e in await client.events(info.run_id)}
    assert (stored["o3"].delivered_by, stored["o3"].delivered_why) == ("alice", "by phone")
    assert json.loads(stored["o3"].payload) == {"approved": True}


def test_stead_events_ls_shows_an_operator_delivery_as_such(sqlite_url: str) -> None:
    async def approved() -> str:
        store = await stead.open_store(sqlite_url)
        try:
            client = stead.Client(store, web_app.app)
            info = await client.start("approval", "8")
            await settle(store)
            [wait] = await client.waits(run_id=info.run_id)
            await operator.act(client, "approve", _d(info.run_id, wait.wait_id, why="by phone"))
            return info.run_id
        finally:
            await store.close()

    run_id = asyncio.run(approved())
    shown = cli(sqlite_url, "events", "ls", run_id)
    assert shown.exit_code == 0 and "accepted" in shown.output
    assert "by operator ops: by phone" in shown.output


async def test_fork_is_an_operator_action_audited_like_the_others(store: stead.Store) -> None:
    client = stead.Client(store, web_app.app)
    waiting = await client.start("approval", "6")
    await settle(store)
    with pytest.raises(stead.InvalidInput, match="journal position"):
        await operator.act(client, "fork", _d(waiting.run_id, at="two"))
    done = await operator.act(client, "fork", _d(waiting.run_id, at="0"))
    child = done.message.rsplit(" ", 1)[-1]
    lineage = await client.lineage(child)
    assert lineage.parent is not None and lineage.parent.parent_id == waiting.run_id
    audit = await store.list_actions(waiting.run_id)
    assert [(a.action, a.outcome) for a in audit] == [("fork", "refused"), ("fork", "done")]


old_shop = stead.App("deployshop")
new_shop = stead.App("deployshop")


@old_shop.workflow(version=1)
async def doc(run: stead.Run, text: str) -> str:
    return await run.step("upper", str.upper, text)


@new_shop.workflow(name="doc", version=2)
async def doc_v2(run: stead.Run, text: str, suffix: str) -> str:
    return await run.step("upper", str.upper, text) + suffix


@new_shop.migration("doc", from_version=1, to_version=2)
def doc_to_v2(old: stead.MigrationView) -> stead.Migrated:
    return stead.Migrated(args=[*old.args, "!"])


async def test_a_stranded_run_needs_a_human_who_migrates_it_and_can_roll_back(
    store: stead.Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(attention, "STRANDED_AFTER", 0.0)
    started = await stead.Client(store, old_shop).start("doc", "hi")
    client = stead.Client(store, new_shop)  # the new deploy: only version 2 is hosted
    [found] = await operator.needs_a_human(client)
    assert found.kind == AttentionKind.STRANDED and "doc@1" in found.summary
    assert [(a.name, t) for a, t in found.actions] == [("migrate", "2"), ("cancel", "")]
    done = await operator.act(client, "migrate", _d(started.run_id, "2", dry_run="yes"))
    assert done.message.startswith("dry run") and (await client.get(started.run_id)).version == 1
    done = await operator.act(client, "migrate", _d(started.run_id, "2", dry_run="no"))
    assert "to 2" in done.message and (await client.get(started.run_id)).version == 2
    assert [a.name for a, _ in operator.offered(await operator.situation(client, started.run_id))
            ].count("rollback") == 1
    await operator.act(client, "rollback", _d(started.run_id))
    assert (await client.get(started.run_id)).version == 1
    audit = await store.list_actions(started.run_id)
    assert [a.action for a in audit] == ["migrate", "migrate", "rollback"]


async def test_retry_is_offered_on_an_unknown_effect_only_where_its_check_is_asked_again(
    store: stead.Store,
) -> None:
    app = stead.App("asked")
    answers = ["the bank does not say", "done"]

    def check(op: stead.Operation) -> stead.Outcome:
        said = answers.pop(0)
        return stead.Outcome.done("rf_9") if said == "done" else stead.Outcome.unknown(said)

    @app.workflow()
    async def pay(run: stead.Run, amount: int) -> Any:
        def charge(op: stead.Operation, n: int) -> str:
            raise stead.OutcomeUncertain("timed out")

        return await run.effect("charge", charge, amount, check=check)

    client = stead.Client(store, app)
    info = await client.start(pay, 9)
    await stead.Worker(app, store).run_until_idle()
    [found] = await operator.needs_a_human(client)
    assert found.kind == AttentionKind.OUTCOME_UNKNOWN
    assert [a.name for a, _ in found.actions] == ["reconcile", "retry"]
    await operator.act(client, "retry", _d(info.run_id, why="the bank's API is back"))
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "rf_9"
