"""stead.contrib.google_adk, in process: an ADK agent's model calls and tool
calls as stead steps (a declared effect as a stead effect), its approvals
(ADK's `require_confirmation` included) as stead waits. The model is a
`google.adk.models.BaseLlm` subclass (tests/workers/adk_app.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("google.adk", reason="google-adk is installed beside the dev set: "
                    "pip install --no-deps -r .ci/beside-dev.txt")

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.runners import InMemoryRunner
from google.genai import types

import stead
from stead.contrib import google_adk as durable
from tests.workers import adk_app, agents_app

pytestmark = pytest.mark.usefixtures("sdk_dir")


def _names(journal: list[stead.Record]) -> list[str]:
    return [r.name for r in journal if r.status != stead.records.RecordStatus.STARTED]


async def _finish_waiting(client: stead.Client, store: stead.Store, run_id: str) -> None:
    [w] = await client.waits(run_id=run_id)
    await client.deliver(run_id, wait_id=w.wait_id, event_id="done", payload={})
    await stead.Worker(adk_app.app, store).run_until_idle()


async def test_a_replay_asks_no_model_and_runs_no_tool_again(store: stead.Store) -> None:
    client = stead.Client(store, adk_app.app)
    info = await client.start(adk_app.weather_twice, "Paris")
    await stead.Worker(adk_app.app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    names = _names(await store.load_journal(info.run_id))
    assert names[0] == names[3] == "model scripted"
    # asked in the order temperature, forecast; finished the other way round
    assert agents_app.lines("tools.log") == ["temperature started", "forecast", "temperature"]
    assert names[1:3] == ["forecast", "temperature"]
    await _finish_waiting(client, store, info.run_id)
    result = await client.result(info.run_id, timeout=5)
    # the tool's state change and the model's usage come back from the journal
    assert result == {"answer": "Paris: 12C / Paris: rain", "sky": ["rain"], "tokens": 50}
    assert agents_app.lines("model.log") == ["asked", "asked"]  # nothing asked again
    assert len(agents_app.lines("tools.log")) == 3  # nothing run again


async def test_a_prompt_changed_under_a_recorded_run_is_not_answered_from_it(
    store: stead.Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = stead.Client(store, adk_app.app)
    info = await client.start(adk_app.weather_twice, "Paris")
    await stead.Worker(adk_app.app, store).run_until_idle()
    monkeypatch.setattr(adk_app, "INSTRUCTIONS", "Answer in French.")  # a new deploy
    await _finish_waiting(client, store, info.run_id)
    stopped = await client.get(info.run_id)
    assert stopped.status == "incompatible_checkpoint", stopped.error
    assert "model scripted" in str(stopped.error)
    assert len(agents_app.lines("model.log")) == 2  # the old answer was not reused, nor re-asked


async def test_ids_the_model_left_out_are_made_from_the_journal(store: stead.Store) -> None:
    client = stead.Client(store, adk_app.app)
    info = await client.start(adk_app.weather, "Paris")
    await stead.Worker(adk_app.app, store).run_until_idle()
    first = (await store.load_journal(info.run_id))[0]
    answer = json.loads(first.payload)
    ids = [p["functionCall"]["id"] for p in answer["content"]["parts"]]
    assert ids == ["adk-stead-model#0-0", "adk-stead-model#0-1"]  # not ADK's random ones
    assert answer["usageMetadata"]["totalTokenCount"] == 25


async def test_a_live_call_streams_its_deltas_and_a_replayed_one_its_answer(
    store: stead.Store,
) -> None:
    client = stead.Client(store, adk_app.app)
    info = await client.start(adk_app.weather_twice, "Paris", True)
    await stead.Worker(adk_app.app, store).run_until_idle()
    await _finish_waiting(client, store, info.run_id)
    assert (await client.result(info.run_id, timeout=5))["answer"] == \
        "Paris: 12C / Paris: rain"
    live, replayed = (json.loads(line) for line in agents_app.lines("deltas.log"))
    assert live == ["Paris: 12C /", " Paris: rain"]  # as the model streamed them
    assert replayed == []  # no deltas to give: the whole answer comes from the journal


async def test_a_confirmation_is_a_bound_single_use_wait(
    store: stead.Store, sdk_dir: Path,
) -> None:
    client = stead.Client(store, adk_app.app)
    info = await client.start(adk_app.refund_order, "123")
    await stead.Worker(adk_app.app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    [w] = await client.waits(run_id=info.run_id)
    assert w.kind == durable.APPROVAL
    assert json.loads(w.request) == {"tool": "refund", "call_id": "call_refund",
                                     "arguments": {"order_id": "123", "amount": 4200}}
    asked = json.loads((sdk_dir / "approval.json").read_text())
    bind = json.loads(w.bind)
    wrong = await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e0",
                                 token=asked["token"], payload={"approved": True},
                                 bind={**bind, "arguments_sha256": "0" * 64})
    assert isinstance(wrong, stead.Rejected)  # an answer about other arguments
    ok = await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1",
                              token=asked["token"], payload={"approved": True}, bind=bind)
    assert isinstance(ok, stead.Accepted)
    again = await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e2",
                                 token=asked["token"], payload={"approved": True}, bind=bind)
    assert not isinstance(again, stead.Accepted)  # single-use
    await stead.Worker(adk_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "done: refunded 4200 on order 123"
    [sent] = agents_app.lines("ledger.log")
    assert sent.startswith("123 4200 ")  # the effect's idempotency key went with it


async def test_a_refusal_is_told_to_the_model_and_the_tool_never_runs(
    store: stead.Store,
) -> None:
    client = stead.Client(store, adk_app.app)
    info = await client.start(adk_app.refund_order, "123", False)
    await stead.Worker(adk_app.app, store).run_until_idle()
    [w] = await client.waits(run_id=info.run_id)
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="no",
                         payload={"approved": False, "reason": "over the limit"},
                         bind=json.loads(w.bind))
    await stead.Worker(adk_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == \
        "done: a person refused this call: over the limit"
    assert agents_app.lines("ledger.log") == []


async def test_a_tool_named_in_approvals_waits_for_a_person_too(store: stead.Store) -> None:
    client = stead.Client(store, adk_app.app)
    info = await client.start(adk_app.refund_named, "123")
    await stead.Worker(adk_app.app, store).run_until_idle()
    [w] = await client.waits(run_id=info.run_id)
    assert w.kind == durable.APPROVAL and agents_app.lines("ledger.log") == []
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="yes",
                         payload={"approved": True}, bind=json.loads(w.bind))
    await stead.Worker(adk_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "done: refunded 4200 on order 123"
    assert len(agents_app.lines("ledger.log")) == 1
    assert agents_app.lines("model.log") == ["asked", "asked"]


async def test_an_effect_whose_answer_is_lost_is_found_by_its_check(
    store: stead.Store,
) -> None:
    adk_app.payments.clear()
    client = stead.Client(store, adk_app.app)
    info = await client.start(adk_app.checked_refund)
    await stead.Worker(adk_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "done: refunded as rf_123"
    assert agents_app.lines("ledger.log") == ["123 4200"]  # sent once, not again
    assert len(adk_app.payments) == 1


async def test_outside_a_stead_run_the_plugin_answers_nothing() -> None:
    agent = LlmAgent(name="weather", model=adk_app.ScriptedLlm(script=adk_app.weather_script),
                     tools=[adk_app.temperature, adk_app.forecast])
    runner = InMemoryRunner(app=App(name="weather", root_agent=agent,
                                    plugins=[durable.SteadPlugin()]))
    session = await runner.session_service.create_session(app_name=runner.app_name,
                                                          user_id="u")
    texts = [e.content.parts[0].text async for e in runner.run_async(
        user_id="u", session_id=session.id,
        new_message=types.Content(role="user", parts=[types.Part(text="weather")]))
        if e.is_final_response() and e.content and e.content.parts]
    await runner.close()
    assert texts == ["Paris: 12C / Paris: rain"]


async def test_operation_outside_an_effect_tool_says_where_it_belongs() -> None:
    with pytest.raises(stead.SteadError, match="declared as an effect"):
        durable.operation()
