"""stead.contrib.strands, in process: a Strands agent's model calls and tool
calls as stead steps (a declared effect as a stead effect), its interrupts as
stead waits. The model is a `strands.models.Model` subclass
(tests/workers/strands_app.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("strands", reason="strands-agents is installed beside the dev set: "
                    "pip install --no-deps -r .ci/beside-dev.txt")

from strands import Agent

import stead
from stead.contrib import strands as durable
from tests.workers import agents_app, strands_app

pytestmark = pytest.mark.usefixtures("sdk_dir")


def _names(journal: list[stead.Record]) -> list[str]:
    return [r.name for r in journal if r.status != stead.records.RecordStatus.STARTED]


async def _finish_waiting(client: stead.Client, store: stead.Store, run_id: str) -> None:
    [w] = await client.waits(run_id=run_id)
    await client.deliver(run_id, wait_id=w.wait_id, event_id="done", payload={})
    await stead.Worker(strands_app.app, store).run_until_idle()


async def test_a_replay_asks_no_model_and_runs_no_tool_again(store: stead.Store) -> None:
    client = stead.Client(store, strands_app.app)
    info = await client.start(strands_app.weather_twice, "Paris")
    await stead.Worker(strands_app.app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    names = _names(await store.load_journal(info.run_id))
    assert names[0] == names[3] == "model scripted"
    # asked in the order temperature, forecast; finished the other way round
    assert agents_app.lines("tools.log") == ["temperature started", "forecast", "temperature"]
    assert names[1:3] == ["forecast", "temperature"]
    await _finish_waiting(client, store, info.run_id)
    result = await client.result(info.run_id, timeout=5)
    assert result == {"answer": "Paris: 12C / Paris: rain", "stop": "end_turn", "tokens": 50}
    assert agents_app.lines("model.log") == ["asked", "asked"]  # nothing asked again
    assert len(agents_app.lines("tools.log")) == 3  # nothing run again


async def test_a_prompt_changed_under_a_recorded_run_is_not_answered_from_it(
    store: stead.Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = stead.Client(store, strands_app.app)
    info = await client.start(strands_app.weather_twice, "Paris")
    await stead.Worker(strands_app.app, store).run_until_idle()
    monkeypatch.setattr(strands_app, "INSTRUCTIONS", "Answer in French.")  # a new deploy
    await _finish_waiting(client, store, info.run_id)
    stopped = await client.get(info.run_id)
    assert stopped.status == "incompatible_checkpoint", stopped.error
    assert "model scripted" in str(stopped.error)
    assert len(agents_app.lines("model.log")) == 2  # the old answer was not reused, nor re-asked


async def test_the_recorded_answer_is_the_models_own_message(store: stead.Store) -> None:
    client = stead.Client(store, strands_app.app)
    info = await client.start(strands_app.weather, "Paris")
    await stead.Worker(strands_app.app, store).run_until_idle()
    first = (await store.load_journal(info.run_id))[0]
    answer = json.loads(first.payload)
    assert answer["stop_reason"] == "tool_use"
    assert [b["toolUse"]["toolUseId"] for b in answer["message"]["content"]] == \
        ["call_temp", "call_sky"]
    assert answer["usage"]["totalTokens"] == 25


async def test_a_live_call_streams_its_deltas_and_a_replayed_one_its_answer(
    store: stead.Store,
) -> None:
    client = stead.Client(store, strands_app.app)
    info = await client.start(strands_app.weather_streamed, "Paris")
    await stead.Worker(strands_app.app, store).run_until_idle()
    await _finish_waiting(client, store, info.run_id)
    assert await client.result(info.run_id, timeout=5) == {"answer": "Paris: 12C / Paris: rain"}
    live, replayed = (json.loads(line) for line in agents_app.lines("deltas.log"))
    assert live == ["Paris: 12C /", " Paris: rain"]  # as the model streamed them
    assert replayed == []  # no deltas to give: the whole message comes from the journal
    assert agents_app.lines("model.log") == ["asked", "asked"]


async def test_an_approval_is_a_bound_single_use_wait(store: stead.Store, sdk_dir: Path) -> None:
    client = stead.Client(store, strands_app.app)
    info = await client.start(strands_app.refund_order, "123")
    await stead.Worker(strands_app.app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    [w] = await client.waits(run_id=info.run_id)
    assert w.kind == durable.INTERRUPT
    assert json.loads(w.request) == {"name": "approval", "reason": {
        "tool": "refund", "input": {"order_id": "123", "amount": 4200}}}
    asked = json.loads((sdk_dir / "approval.json").read_text())
    bind = json.loads(w.bind)
    wrong = await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e0",
                                 token=asked["token"], payload={"approved": True},
                                 bind={**bind, "reason_sha256": "0" * 64})
    assert isinstance(wrong, stead.Rejected)  # an answer to another question
    ok = await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1",
                              token=asked["token"], payload={"approved": True}, bind=bind)
    assert isinstance(ok, stead.Accepted)
    again = await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e2",
                                 token=asked["token"], payload={"approved": True}, bind=bind)
    assert not isinstance(again, stead.Accepted)  # single-use
    await stead.Worker(strands_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "done: refunded 4200 on order 123"
    [sent] = agents_app.lines("ledger.log")
    assert sent.startswith("123 4200 ")  # the effect's idempotency key went with it


async def test_a_refusal_is_told_to_the_model_and_the_tool_never_runs(
    store: stead.Store,
) -> None:
    client = stead.Client(store, strands_app.app)
    info = await client.start(strands_app.refund_order, "123", False)
    await stead.Worker(strands_app.app, store).run_until_idle()
    [w] = await client.waits(run_id=info.run_id)
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="no",
                         payload={"approved": False, "reason": "over the limit"},
                         bind=json.loads(w.bind))
    await stead.Worker(strands_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == \
        "done: a person refused this call: over the limit"
    assert agents_app.lines("ledger.log") == []


async def test_a_hooks_own_interrupt_is_a_stead_wait(store: stead.Store) -> None:
    client = stead.Client(store, strands_app.app)
    info = await client.start(strands_app.confirmed_forecast, "Paris")
    await stead.Worker(strands_app.app, store).run_until_idle()
    [w] = await client.waits(run_id=info.run_id)
    assert json.loads(w.request) == {"name": "confirm", "reason": {"city": "Paris"}}
    assert "forecast" not in agents_app.lines("tools.log")
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="yes",
                         payload={"approved": True}, bind=json.loads(w.bind))
    await stead.Worker(strands_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "Paris: 12C / Paris: rain"
    ran = agents_app.lines("tools.log")
    assert ran.count("forecast") == 1 and ran.count("temperature") == 1
    assert agents_app.lines("model.log") == ["asked", "asked"]


async def test_a_tools_own_interrupt_is_journaled_and_replayed(store: stead.Store) -> None:
    client = stead.Client(store, strands_app.app)
    info = await client.start(strands_app.chosen)
    await stead.Worker(strands_app.app, store).run_until_idle()
    [w] = await client.waits(run_id=info.run_id)
    assert json.loads(w.request) == {"name": "pick", "reason": {"city": "Paris"}}
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="pick",
                         payload={"choice": "rain"}, bind=json.loads(w.bind))
    await stead.Worker(strands_app.app, store).run_until_idle()  # to the second wait
    await _finish_waiting(client, store, info.run_id)  # a replay of the whole agent
    assert await client.result(info.run_id, timeout=5) == {"answer": "picked rain for Paris"}
    # interrupted once, run again once answered (as Strands does), never on replay
    assert agents_app.lines("tools.log") == ["choose started", "choose started", "choose"]
    assert agents_app.lines("model.log") == ["asked", "asked"]


async def test_an_effect_whose_answer_is_lost_is_found_by_its_check(
    store: stead.Store,
) -> None:
    strands_app.payments.clear()
    client = stead.Client(store, strands_app.app)
    info = await client.start(strands_app.checked_refund)
    await stead.Worker(strands_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "done: refunded as rf_123"
    assert agents_app.lines("ledger.log") == ["123 4200"]  # sent once, not again
    assert len(strands_app.payments) == 1


async def test_outside_a_stead_run_the_middleware_passes_every_call_through() -> None:
    agent = Agent(model=strands_app.ScriptedModel(strands_app.weather_script),
                  tools=[strands_app.temperature, strands_app.forecast],
                  callback_handler=None)
    durable._wire(agent)
    result = await agent.invoke_async("weather in Paris")
    assert str(result).strip() == "Paris: 12C / Paris: rain"


async def test_an_agent_with_a_session_manager_is_refused(store: stead.Store) -> None:
    from strands.session import FileSessionManager

    app = stead.App("refuse")

    @app.workflow()
    async def wf(run: stead.Run, folder: str) -> str:
        agent = Agent(model=strands_app.ScriptedModel(strands_app.weather_script),
                      session_manager=FileSessionManager("s1", storage_dir=folder),
                      callback_handler=None)
        return str(await durable.run(run, agent, "weather"))

    client = stead.Client(store, app)
    info = await client.start(wf, str(agents_app.folder()))
    await stead.Worker(app, store).run_until_idle()
    failed = await client.get(info.run_id)
    assert failed.status == "failed" and "session_manager" in str(failed.error)
    assert agents_app.lines("model.log") == []


async def test_operation_outside_an_effect_tool_says_where_it_belongs() -> None:
    with pytest.raises(stead.SteadError, match="declared as an effect"):
        durable.operation()
