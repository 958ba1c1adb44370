"""stead.contrib.openai_agents, in process: the OpenAI Agents SDK's model
answers and tool calls journaled, replayed without asking or running again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, ModelResponse, RunConfig, Runner, Usage, UserError
from agents.testing import assistant_message, function_call
from agents.tracing import Span, Trace, TracingProcessor, set_trace_processors
from agents.tracing.processors import default_processor
from openai.types.responses import ResponseOutputMessage

import stead
from stead.contrib import openai_agents
from stead.contrib._scope import Scope
from stead.contrib.openai_agents import _graph, _responses, _session
from tests.workers import agents_app

pytestmark = pytest.mark.usefixtures("sdk_dir")


async def _wake(client: stead.Client, store: stead.Store, run_id: str,
                app: stead.App = agents_app.app) -> None:
    """Deliver the run's `done` event and let a worker replay it to its end."""
    [w] = await client.waits(run_id=run_id)
    await client.deliver(run_id, wait_id=w.wait_id, event_id="e1", payload={})
    await stead.Worker(app, store).run_until_idle()


async def test_parallel_calls_finishing_in_reverse_order_replay_identically(
    store: stead.Store,
) -> None:
    client = stead.Client(store, agents_app.app)
    info = await client.start(agents_app.weather_twice, "Paris")
    await stead.Worker(agents_app.app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    assert agents_app.lines("model.log") == ["asked", "asked"]
    # asked in the order temperature, forecast; finished the other way round
    assert agents_app.lines("tools.log") == ["temperature started", "forecast", "temperature"]
    # (a call's started marker rides with whatever commit comes while it is in flight)
    journal = [r for r in await store.load_journal(info.run_id)
               if r.status != stead.records.RecordStatus.STARTED]
    assert [r.addr.split(".")[1] for r in journal[:3]] == ["m:model#0", "t:call_sky", "t:call_temp"]
    await _wake(client, store, info.run_id)
    # the replayed second request (its digest covers the tool outputs, in order) matched
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
    assert asked["arguments"] == {"order_id": "123", "amount": 4200}  # decoded, not text
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



async def test_a_prompt_changed_under_a_recorded_answer_stops_the_run(
    store: stead.Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = stead.Client(store, agents_app.app)
    info = await client.start(agents_app.weather_twice, "Paris")
    await stead.Worker(agents_app.app, store).run_until_idle()
    monkeypatch.setattr(agents_app, "INSTRUCTIONS", "Answer in French.")  # a new deploy
    await _wake(client, store, info.run_id)
    stopped = await client.get(info.run_id)
    assert stopped.status == "incompatible_checkpoint", stopped.error
    assert "model ScriptedModel" in str(stopped.error)
    assert len(agents_app.lines("model.log")) == 2  # the old answer was not reused, nor re-asked


async def test_a_handoff_replays(store: stead.Store) -> None:
    client = stead.Client(store, agents_app.app)
    info = await client.start(agents_app.triage, "Paris")
    await stead.Worker(agents_app.app, store).run_until_idle()
    assert len(agents_app.lines("model.log")) == 3  # triage, then weather twice
    await _wake(client, store, info.run_id)
    assert await client.result(info.run_id, timeout=5) == {
        "answer": "Paris: 12C / Paris: rain", "agent": "weather"}
    assert len(agents_app.lines("model.log")) == 3
    assert len(agents_app.lines("tools.log")) == 3


class Spans(TracingProcessor):
    """Keeps the type of every span the SDK ends."""

    def __init__(self) -> None:
        self.ended: list[str] = []
        self.traces: list[dict[str, Any]] = []

    def on_trace_start(self, trace: Trace) -> None:
        self.traces.append(trace.export() or {})

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        self.ended.append(span.span_data.type)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


@pytest.fixture
def spans() -> Iterator[Spans]:
    kept = Spans()
    set_trace_processors([kept])
    yield kept
    set_trace_processors([default_processor()])


async def test_a_replayed_model_call_emits_no_generation_span(
    store: stead.Store, spans: Spans,
) -> None:
    client = stead.Client(store, agents_app.app)
    info = await client.start(agents_app.weather_twice, "Paris")
    await stead.Worker(agents_app.app, store).run_until_idle()
    assert spans.ended.count("generation") == 2
    assert [t["group_id"] for t in spans.traces] == [info.run_id]  # traces grouped by run
    spans.ended.clear()
    await _wake(client, store, info.run_id)
    assert (await client.get(info.run_id)).status == "completed"
    assert "generation" not in spans.ended  # the model was not called: nothing to trace


async def test_without_on_approval_the_wait_has_no_token(store: stead.Store) -> None:
    client = stead.Client(store, agents_app.app)
    info = await client.start(agents_app.refund_order, "123", None, False)
    await stead.Worker(agents_app.app, store).run_until_idle()
    [w] = await client.waits(run_id=info.run_id)
    assert w.kind == "approval" and w.token_hash is None
    ok = await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1",
                              payload={"approved": True}, bind=json.loads(w.bind))
    assert isinstance(ok, stead.Accepted)
    await stead.Worker(agents_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "done: refunded 4200 on order 123"


async def test_an_approval_that_expires_is_a_refusal(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    client = stead.Client(fstore, agents_app.app)
    info = await client.start(agents_app.refund_order, "123", 60.0)
    await stead.Worker(agents_app.app, fstore).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    clock.advance(61)
    await stead.Worker(agents_app.app, fstore).run_until_idle()
    answer = await client.result(info.run_id, timeout=5)
    assert answer.startswith("done: no decision on this call arrived")
    assert agents_app.lines("ledger.log") == []


async def test_an_effect_tool_outside_a_stead_run_says_so() -> None:
    agent = Agent(name="refunds", model=agents_app.model(agents_app.refund_answer),
                  tools=[openai_agents.effect_tool(agents_app.refund,
                                                   failure_error_function=None)])
    with pytest.raises(UserError, match="acts only in a stead run"):  # the SDK's wrapping
        await Runner.run(agent, "refund order 123", run_config=RunConfig(tracing_disabled=True))
    assert agents_app.lines("ledger.log") == []


def test_an_effect_tool_shows_the_model_its_arguments_not_the_operation() -> None:
    tool = openai_agents.effect_tool(agents_app.refund)
    assert isinstance(tool, openai_agents.EffectTool)
    assert tool.name == "refund" and tool.description.startswith("Refund an order")
    assert sorted(tool.params_json_schema["properties"]) == ["amount", "order_id"]
    with pytest.raises(TypeError, match="takes the operation first"):
        openai_agents.effect_tool(lambda: None)


async def test_an_sdk_session_is_refused(store: stead.Store) -> None:
    app = stead.App("refuse")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        result = await openai_agents.run(run, agents_app.weather_agent(), "Paris",
                                         session=object())
        return str(result.final_output)

    info = await stead.Client(store, app).start(wf)
    await stead.Worker(app, store).run_until_idle()
    failed = await stead.Client(store).get(info.run_id)
    assert failed.status == "failed" and "session" in str(failed.error)
    assert agents_app.lines("model.log") == []


async def test_a_streamed_turn_is_the_journaled_answer_in_one_event(store: stead.Store) -> None:
    app = stead.App("stream")

    @app.workflow()
    async def wf(run: stead.Run) -> dict[str, Any]:
        session = _session.Session(run, Scope())
        agent = _graph.Graph(session).agent(agents_app.weather_agent())
        with session.scope.sdk():
            streamed = Runner.run_streamed(agent, "Paris",
                                           run_config=RunConfig(tracing_disabled=True))
            events = [e.type async for e in streamed.stream_events()]
        await (await run.wait("done", token=False))
        return {"answer": streamed.final_output, "raw": events.count("raw_response_event")}

    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store).run_until_idle()
    await _wake(client, store, info.run_id, app)
    assert await client.result(info.run_id, timeout=5) == {
        "answer": "Paris: 12C / Paris: rain", "raw": 2}  # one completed event per turn
    assert len(agents_app.lines("model.log")) == 2


def test_a_journaled_answer_comes_back_equal_even_missing_a_newly_required_field() -> None:
    answer = ModelResponse(
        output=[function_call("forecast", {"city": "Paris"}, call_id="c1"),
                assistant_message("rain")],
        usage=Usage(requests=1, input_tokens=7, output_tokens=3, total_tokens=10),
        response_id="resp_1", request_id="req_1")
    recorded = json.loads(json.dumps(_responses.dump(answer)))
    again = _responses.load(recorded)
    assert again.output == answer.output and again.usage == answer.usage
    assert (again.response_id, again.request_id) == ("resp_1", "req_1")
    # recorded by an openai release before `status` was required on messages
    del recorded["output"][1]["status"]
    older = _responses.load(recorded)
    assert isinstance(older.output[1], ResponseOutputMessage)
    assert older.output[1].content[0].text == "rain"
