"""stead.contrib.crewai in-process, offline (CrewAI over a LiteLLM provider of
the test's own that answers with LiteLLM's `mock_completion`): a crew killed
after its first tool result resumes without asking a recorded turn or running
a recorded tool again; a flow's feedback is a bound wait and each method runs
once; what is refused says what to do. Skipped where CrewAI is not installed
(it lives in an environment of its own: docs/guides/agent-author/crewai.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("crewai")

import litellm
from crewai import LLM, Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM

import stead
from stead import errors
from stead.contrib import crewai as sc
from stead.contrib.crewai import _models
from stead.records import RecordKind
from tests.helpers import Crash, crash_then_resume
from tests.workers import crewai_app

# CrewAI's own code warns of parameters and APIs it deprecated and still uses
# itself; LiteLLM's types warn of a pydantic limit they live with.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:Items? .* the `ReadOnly` qualifier:UserWarning")]


@pytest.fixture(autouse=True)
def _folder(sdk_dir: Path) -> Path:
    return sdk_dir


async def test_a_crew_killed_in_its_first_tool_asks_no_recorded_turn_again(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    app = stead.App("crew")
    lookup = crewai_app.dying_lookup()  # its worker dies after it ran, once

    @app.workflow(version=1)
    async def refund_order(run: stead.Run) -> str:
        output = await sc.kickoff(run, crewai_app.crew(lookup), {"order_id": "123"})
        return str(output.raw)

    client = stead.Client(fstore, app)
    info = await client.start(refund_order)
    await crash_then_resume(app, fstore, clock)
    run = await client.get(info.run_id)
    assert run.status == "waiting", run.error  # for the refund's approval
    assert crewai_app.lines("tools.log") == ["lookup 123", "lookup 123"]
    assert crewai_app.lines("model.log") == ["asked", "asked"]  # the first turn asked once
    journal = await client.journal(info.run_id)
    models = [stead.Completion.from_json(json.loads(r.payload)) for r in journal
              if r.kind == RecordKind.LLM]
    assert [m.provider for m in models] == ["litellm", "litellm"]
    assert "Action: lookup_order" in models[0].text and "Action: refund" in models[1].text
    assert models[0].usage.output_tokens > 0
    [w] = await client.waits(run_id=info.run_id)
    assert w.kind == sc.APPROVAL
    assert json.loads(w.request or "{}") == {"tool": "refund",
                                              "arguments": {"order_id": "123", "amount": 4200}}


class Native(litellm.CustomLLM):  # type: ignore[misc]
    """A provider whose model calls tools natively (the OpenAI way), not by ReAct text."""

    def completion(self, model: str, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        crewai_app.log("model.log", "asked")
        if "4200" in json.dumps(messages):
            return litellm.mock_completion(model="n", messages=messages,
                                           mock_response="Order 123 was paid 4200.")
        return litellm.mock_completion(model="n", messages=messages, mock_response="",
                                       mock_tool_calls=[{
                                           "id": "call_1", "type": "function", "function": {
                                               "name": "lookup_order",
                                               "arguments": '{"order_id": "123"}'}}])

    async def acompletion(self, model: str, messages: list[dict[str, Any]],
                          **kwargs: Any) -> Any:
        return self.completion(model, messages, **kwargs)


async def test_a_crew_calling_tools_natively_is_journaled_the_same(
    fstore: stead.Store, clock: stead.FakeClock, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(litellm, "custom_provider_map", [
        *litellm.custom_provider_map, {"provider": "native", "custom_handler": Native()}])
    litellm.register_model({"native/clerk": {
        "supports_function_calling": True, "litellm_provider": "native", "mode": "chat",
        "max_tokens": 1000, "max_input_tokens": 10000, "max_output_tokens": 1000}})
    app = stead.App("native")
    lookup = crewai_app.dying_lookup()  # its worker dies after it ran, once

    @app.workflow(version=1)
    async def paid(run: stead.Run) -> str:
        clerk = Agent(role="clerk", goal="Look orders up.", backstory="At the desk.",
                      tools=[lookup], llm=LLM(model="native/clerk", is_litellm=True))
        crew = Crew(agents=[clerk], tasks=[Task(description="How much was order 123 paid?",
                                                expected_output="the amount", agent=clerk)])
        return str((await sc.kickoff(run, crew)).raw)

    client = stead.Client(fstore, app)
    info = await client.start(paid)
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id) == "Order 123 was paid 4200."
    assert crewai_app.lines("model.log") == ["asked", "asked"]  # the tool call asked once
    assert crewai_app.lines("tools.log") == ["lookup 123", "lookup 123"]
    [first, _] = [stead.Completion.from_json(json.loads(r.payload))
                  for r in await client.journal(info.run_id) if r.kind == RecordKind.LLM]
    assert first.tool_calls == (stead.ToolCall("call_1", "lookup_order", {"order_id": "123"},
                                               '{"order_id": "123"}'),)


async def test_a_flows_feedback_is_a_bound_wait_and_each_method_runs_once(
    store: stead.Store,
) -> None:
    client = stead.Client(store, crewai_app.app)
    info = await client.start(crewai_app.review)
    await stead.Worker(crewai_app.app, store).run_until_idle()
    [w] = await client.waits(run_id=info.run_id)
    assert w.kind == sc.FEEDBACK and w.token_hash is None
    assert json.loads(w.request or "{}") == {
        "method": "review", "message": "Approve this refund?",
        "output": "refund 4200 on order 123", "emit": None}
    wrong = {**json.loads(w.bind), "method": "act"}
    assert isinstance(await client.deliver(info.run_id, wait_id=w.wait_id, event_id="x",
                                           payload={"feedback": "no"}, bind=wrong),
                      stead.Rejected)
    assert isinstance(await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e",
                                           payload={"feedback": "ok"},
                                           bind=json.loads(w.bind)), stead.Accepted)
    await stead.Worker(crewai_app.app, store).run_until_idle()
    assert await client.result(info.run_id) == {"plan": "refund 4200", "feedback": "ok"}
    assert crewai_app.lines("nodes.log") == ["plan", "review", "act"]
    steps = [r.name for r in await client.journal(info.run_id) if r.status == "ok"]
    assert steps[:2] == ["flow plan", "flow review"] and "flow act" in steps


def test_an_effect_tool_acts_only_in_a_run_and_takes_the_operation_first() -> None:
    with pytest.raises(errors.SteadError, match="only in a stead run"):
        crewai_app.REFUND._run(order_id="1", amount=1)
    with pytest.raises(TypeError, match="operation first"):
        sc.effect_tool(lambda: None)
    assert list(crewai_app.REFUND.args_schema.model_fields) == ["order_id", "amount"]


async def test_what_stead_cannot_journal_is_refused(store: stead.Store) -> None:
    app = stead.App("refused")

    class Elsewhere(BaseLLM):  # type: ignore[misc]
        """A model client of the user's own: nothing stead knows to journal."""

        def call(self, *args: Any, **kwargs: Any) -> str:
            return "no"

    @app.workflow(version=1)
    async def other(run: stead.Run) -> Any:
        clerk = Agent(role="clerk", goal="g", backstory="b", llm=Elsewhere(model="mine"))
        return await sc.kickoff(run, Crew(agents=[clerk], tasks=[
            Task(description="d", expected_output="e", agent=clerk)]))

    client = stead.Client(store, app)
    info = await client.start(other)
    await stead.Worker(app, store).run_until_idle()
    run = await client.get(info.run_id)
    assert run.status == "failed" and "is_litellm=True" in (run.error or {})["message"]


def test_the_digest_leaves_crewais_stop_word_out() -> None:
    model = _models.CrewModel("scripted/clerk")
    asked = model.digest_params({"temperature": 0})
    assert model.digest_params({"temperature": 0, "stop": ["\nObservation:"]}) == asked
    assert model.digest_params({"temperature": 1}) != asked


async def test_a_flow_instance_runs_once(store: stead.Store) -> None:
    app = stead.App("flow-once")
    flow = crewai_app.Review()

    @app.workflow(version=1)
    async def twice(run: stead.Run) -> Any:
        await sc.kickoff(run, flow)

    client = stead.Client(store, app)
    first, second = await client.start(twice), await client.start(twice)
    await stead.Worker(app, store).run_until_idle()
    errors_seen = [(await client.get(i.run_id)).error for i in (first, second)]
    assert any(e and "kick off a new one per run" in e["message"] for e in errors_seen)


@pytest.mark.parametrize("persisted", [False, True], ids=["plain", "persist"])
async def test_a_flow_killed_in_a_method_resumes_with_its_typed_state(
    fstore: stead.Store, clock: stead.FakeClock, sdk_dir: Path, persisted: bool,
) -> None:
    """With `@persist`, CrewAI saves the flow's state after each method, live
    and on replay alike (the journal restores the state a replayed method
    left, and CrewAI saves that): after the crash its store holds the end state."""
    from crewai.flow.flow import Flow, listen, start
    from crewai.flow.persistence import persist
    from crewai.flow.persistence.sqlite import SQLiteFlowPersistence
    from pydantic import BaseModel

    class Order(BaseModel):
        id: str = ""
        order_id: str = ""
        paid: int = 0

    died: list[bool] = []
    ids: list[str] = []
    saved = SQLiteFlowPersistence(str(sdk_dir / "flows.db"))

    class Refund(Flow[Order]):
        @start()
        def look_up(self) -> int:
            crewai_app.log("nodes.log", "look_up")
            self.state.order_id, self.state.paid = "123", 4200
            return 4200

        @listen(look_up)
        def refund(self, paid: int) -> str:
            crewai_app.log("nodes.log", "refund")
            if not died:
                died.append(True)
                raise Crash()  # the worker dies mid-method
            ids.append(self.state.id)
            return f"refund {paid} on {self.state.order_id}"

    app = stead.App("typed-flow")
    flow = persist(saved)(Refund) if persisted else Refund

    @app.workflow(version=1)
    async def refund_flow(run: stead.Run) -> Any:
        return await sc.kickoff(run, flow())

    client = stead.Client(fstore, app)
    info = await client.start(refund_flow)
    await crash_then_resume(app, fstore, clock)
    # look_up is not run again: its output and the state it set come from the journal.
    assert await client.result(info.run_id) == "refund 4200 on 123"
    assert crewai_app.lines("nodes.log") == ["look_up", "refund", "refund"]
    assert saved.load_state(ids[0]) == ({"id": ids[0], "order_id": "123", "paid": 4200}
                                        if persisted else None)


async def test_a_streamed_crew_is_journaled_whole_and_replays_the_same_chunks(
    store: stead.Store,
) -> None:
    """CrewAI streams each turn; stead journals the answer built from the
    chunks, hands CrewAI chunks rebuilt from it, and a resumed crew gets the
    same chunks without asking the model again (its deltas go to `on_text`
    only while live)."""
    from crewai.events.event_bus import crewai_event_bus
    from crewai.events.types.llm_events import LLMStreamChunkEvent

    app = stead.App("streamed")
    deltas: list[str] = []
    chunks: list[str] = []

    @crewai_event_bus.on(LLMStreamChunkEvent)
    def seen(source: Any, event: LLMStreamChunkEvent) -> None:
        chunks.append(event.chunk)

    @app.workflow(version=1)
    async def streamed(run: stead.Run) -> str:
        output = await sc.kickoff(run, crewai_app.crew(stream=True), {"order_id": "123"},
                                  on_text=deltas.append)
        return str(output.raw)

    client = stead.Client(store, app)
    info = await client.start(streamed)
    await stead.Worker(app, store).run_until_idle()
    assert crewai_app.lines("model.log") == ["asked (streamed)"] * 2  # waiting for approval
    journal = await client.journal(info.run_id)
    texts = [stead.Completion.from_json(json.loads(r.payload)).text for r in journal
             if r.kind == RecordKind.LLM]
    assert "".join(deltas) == "".join(texts)  # each delta, as it came
    assert chunks == texts  # CrewAI read each answer whole, one chunk
    [w] = await client.waits(run_id=info.run_id)
    assert isinstance(await client.deliver(info.run_id, wait_id=w.wait_id, event_id="ok",
                                           payload={"approved": True},
                                           bind=json.loads(w.bind)), stead.Accepted)
    deltas.clear()
    chunks.clear()
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id) == "Refunded order 123: rf_123."
    # the two recorded turns replayed, the same chunks, nothing asked or streamed again
    assert crewai_app.lines("model.log") == ["asked (streamed)"] * 3
    assert chunks[:2] == texts and len(chunks) == 3
    assert "".join(deltas) == chunks[2]


async def test_a_crew_with_memory_is_refused_saying_why(store: stead.Store) -> None:
    app = stead.App("remembering")

    @app.workflow(version=1)
    async def remembering(run: stead.Run) -> Any:
        crew = crewai_app.crew()
        crew.memory = True
        return await sc.kickoff(run, crew)

    client = stead.Client(store, app)
    info = await client.start(remembering)
    await stead.Worker(app, store).run_until_idle()
    run = await client.get(info.run_id)
    assert run.status == "failed" and "memory" in (run.error or {})["message"]
