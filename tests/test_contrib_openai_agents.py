"""stead.contrib.openai_agents, in process: the OpenAI Agents SDK's model
answers and tool calls journaled, replayed without asking or running again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import stead
from tests.workers import agents_app

pytestmark = pytest.mark.usefixtures("sdk_dir")


async def test_a_woken_run_replays_the_agent_without_asking_or_running_again(
    store: stead.Store,
) -> None:
    client = stead.Client(store, agents_app.app)
    info = await client.start(agents_app.weather_twice, "Paris")
    await stead.Worker(agents_app.app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    assert agents_app.lines("model.log") == ["asked", "asked"]
    assert sorted(agents_app.lines("tools.log")) == [
        "forecast", "temperature", "temperature started"]
    [w] = await client.waits(run_id=info.run_id)
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1", payload={})
    await stead.Worker(agents_app.app, store).run_until_idle()
    result = await client.result(info.run_id, timeout=5)
    assert result == {"answer": "Paris: 12C / Paris: rain", "usage": 50,
                      "last_response": "resp_3"}
    assert len(agents_app.lines("model.log")) == 2  # nothing asked again
    assert len(agents_app.lines("tools.log")) == 3  # nothing run again



async def test_an_approval_is_a_bound_wait_and_the_approved_call_runs_once(
    store: stead.Store, sdk_dir: Path,
) -> None:
    client = stead.Client(store, agents_app.app)
    info = await client.start(agents_app.refund_order, "123")
    await stead.Worker(agents_app.app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    asked = json.loads((sdk_dir / "approval.json").read_text())
    assert asked["tool"] == "refund" and asked["call_id"] == "call_refund"
    assert json.loads(asked["arguments"]) == {"order_id": "123", "amount": 4200}
    [w] = await client.waits(run_id=info.run_id)
    bind = json.loads(w.bind)
    assert bind["call_id"] == "call_refund" and len(bind["arguments_sha256"]) == 64
    assert agents_app.lines("ledger.log") == []  # nothing sent before the decision

    other = await client.deliver(info.run_id, wait_id=asked["wait_id"], event_id="e0",
                                 token=asked["token"], payload={"approved": True},
                                 bind={**bind, "arguments_sha256": "0" * 64})
    assert isinstance(other, stead.Rejected)  # an approval of other arguments
    ok = await client.deliver(info.run_id, wait_id=asked["wait_id"], event_id="e1",
                              token=asked["token"], payload={"approved": True}, bind=bind)
    assert isinstance(ok, stead.Accepted)
    await stead.Worker(agents_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == \
        "done: refunded 4200 on order 123"
    again = await client.deliver(info.run_id, wait_id=asked["wait_id"], event_id="e1",
                                 token=asked["token"], payload={"approved": True}, bind=bind)
    assert isinstance(again, stead.Duplicate)
    assert len(agents_app.lines("ledger.log")) == 1
    assert agents_app.lines("model.log") == ["asked", "asked"]


async def test_a_rejected_call_is_refused_to_the_model_and_never_runs(
    store: stead.Store, sdk_dir: Path,
) -> None:
    client = stead.Client(store, agents_app.app)
    info = await client.start(agents_app.refund_order, "123")
    await stead.Worker(agents_app.app, store).run_until_idle()
    asked = json.loads((sdk_dir / "approval.json").read_text())
    [w] = await client.waits(run_id=info.run_id)
    no = await client.deliver(info.run_id, wait_id=asked["wait_id"], event_id="e1",
                              token=asked["token"], bind=json.loads(w.bind),
                              payload={"approved": False, "reason": "not this one"})
    assert isinstance(no, stead.Accepted)
    await stead.Worker(agents_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "done: not this one"
    assert agents_app.lines("ledger.log") == []

