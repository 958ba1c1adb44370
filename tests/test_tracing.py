"""OpenTelemetry spans and token metrics (`stead.tracing`), read back with
the SDK's in-memory exporter and reader: an attempt per claim, linked to the
one before; live model calls, steps and effects; nothing for what a replay
reuses but one event counting it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import stead
from stead import tracing
from stead.records import RecordKind
from tests import sdk_agents
from tests.helpers import Crash, crash_then_resume
from tests.sdk_agents import Recorded


class Otel:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader])

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def tokens(self) -> dict[str, int]:
        """The token histogram's sums by token type."""
        found: dict[str, int] = {}
        data = self.reader.get_metrics_data()
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == "gen_ai.client.token.usage":
                        for point in metric.data.data_points:
                            kind = str(point.attributes["gen_ai.token.type"])
                            found[kind] = found.get(kind, 0) + int(point.sum)
        return found


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    tracing.instrument(tracer_provider=o.provider, meter_provider=o.meters)
    yield o
    tracing.uninstrument()


def _agent(provider: str, rec: Recorded, sdk_client: Any = None) -> tuple[stead.App, Any]:
    app = stead.App("traced")
    llm = sdk_agents.model(provider, sdk_client or rec.client())
    crashed: list[bool] = []

    async def get_time(city: str) -> dict[str, Any]:
        if not crashed:
            crashed.append(True)
            raise Crash()  # the worker dies after the first tool's result is journaled
        return sdk_agents.get_time(city)

    @app.workflow(version=1)
    async def agent(run: stead.Run) -> str:
        saved = sdk_agents.TOOLS["get_time"]
        sdk_agents.TOOLS["get_time"] = get_time
        try:
            return await sdk_agents.agent(run, provider, llm)
        finally:
            sdk_agents.TOOLS["get_time"] = saved

    return app, agent


async def test_attempts_model_calls_and_steps_make_spans_and_a_replay_makes_none(
        otel: Otel, fstore: stead.Store, clock: stead.FakeClock) -> None:
    rec = Recorded("openai_chat")
    app, agent = _agent("openai_chat", rec)
    client = stead.Client(fstore, app)
    info = await client.start(agent, task_id="ticket-1")
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id) == "It is 18 C and 14:05 in Paris."

    first, second = otel.spans("stead.run")
    assert first.attributes is not None and second.attributes is not None
    assert first.attributes["stead.run.id"] == info.run_id == second.attributes["stead.run.id"]
    assert (first.attributes["stead.run.epoch"], second.attributes["stead.run.epoch"]) == (1, 2)
    assert first.attributes["stead.task.id"] == "ticket-1"
    assert first.attributes["stead.worker.id"] != second.attributes["stead.worker.id"]
    # The takeover links to the attempt before it, from the span context it journaled.
    assert first.context is not None
    [link] = second.links
    assert (link.context.trace_id, link.context.span_id) == (first.context.trace_id,
                                                             first.context.span_id)
    assert not first.links
    [replay] = [e for e in second.events if e.name == "stead.replay"]
    assert replay.attributes == {"stead.replay.records": 2}  # turn-1 and the first tool

    # One model span per turn asked: the recorded turn was not asked, nor traced, again.
    turn1, turn2 = otel.spans("chat ")
    assert turn1.parent is not None and turn1.parent.span_id == first.context.span_id
    assert second.context is not None
    assert turn2.parent is not None and turn2.parent.span_id == second.context.span_id
    attrs = dict(turn1.attributes or {})
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == "gpt-4o-mini"
    assert attrs["gen_ai.response.id"] == "chatcmpl-turn1"
    assert attrs["gen_ai.response.model"] == "gpt-4o-mini-2024-07-18"
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (82, 41)
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 64
    assert "gen_ai.input.messages" not in attrs and "gen_ai.output.messages" not in attrs
    assert otel.tokens() == {"input": 82 + 150, "output": 41 + 12}

    steps = [s.name for s in otel.spans("stead.step")]
    assert steps == ["stead.step tool:get_weather", "stead.step tool:get_time",
                     "stead.step tool:get_time"]  # the crashed attempt, then the live one

    # Each attempt journaled its span context once, and replay skipped it.
    traces = [r for r in await client.journal(info.run_id) if r.kind == RecordKind.TRACE]
    assert [r.epoch for r in traces] == [1, 2]


async def test_effects_have_spans_with_their_key_and_class(otel: Otel,
                                                           store: stead.Store) -> None:
    app = stead.App("fx")

    def send(op: stead.Operation, to: str) -> str:
        return f"sent to {to}"

    @app.workflow(version=1)
    async def mail(run: stead.Run) -> str:
        out: str = await run.effect("send_mail", send, "a@example.com", key="mail-1")
        return out

    client = stead.Client(store, app)
    info = await client.start(mail)
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id) == "sent to a@example.com"
    [span] = otel.spans("stead.effect")
    assert span.name == "stead.effect send_mail"
    assert span.attributes is not None
    assert span.attributes["stead.effect.key"] == "mail-1"
    assert span.attributes["stead.effect.class"] == "not_started"


async def test_content_is_traced_only_when_asked(store: stead.Store) -> None:
    o = Otel()
    tracing.instrument(tracer_provider=o.provider, meter_provider=o.meters,
                       capture_content=True)
    try:
        llm = sdk_agents.model("anthropic_messages", Recorded("anthropic_messages").client())
        await sdk_agents.ask_once(store, llm, "weather?")
    finally:
        tracing.uninstrument()
    [span] = o.spans("chat ")
    attrs = dict(span.attributes or {})
    assert "weather?" in str(attrs["gen_ai.input.messages"])
    assert "Let me look both up." in str(attrs["gen_ai.output.messages"])
    assert attrs["gen_ai.provider.name"] == "anthropic"
    assert attrs["gen_ai.request.max_tokens"] == 1024


async def test_the_sdks_own_client_span_nests_under_steads(otel: Otel,
                                                           store: stead.Store) -> None:
    rec = Recorded("anthropic_messages")
    sdk = anthropic.AsyncAnthropic(api_key="k", http_client=rec.http(),
                                   open_telemetry={"tracer_provider": otel.provider})
    await sdk_agents.ask_once(store, sdk_agents.model("anthropic_messages", sdk))
    [ours] = otel.spans("chat ")
    theirs = [s for s in otel.spans() if s.instrumentation_scope is not None
              and s.instrumentation_scope.name != "stead"]
    assert theirs and ours.context is not None
    assert all(s.parent is not None and s.parent.span_id == ours.context.span_id
               for s in theirs)


async def test_without_instrumenting_nothing_is_traced_or_journaled(store: stead.Store) -> None:
    o = Otel()
    client, run_id, answer = await sdk_agents.ask_once(store, stead.ScriptedModel(["ok"]))
    assert answer == "ok" and not o.spans()
    assert [r.kind for r in await client.journal(run_id)] == [RecordKind.LLM]


async def test_stead_runs_without_opentelemetry_installed(
        store: stead.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m.startswith("opentelemetry")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import fails as if absent
    with pytest.raises(ImportError, match=r"pip install -e '\.\[otel\]' in stead's checkout"):
        tracing.instrument()
    assert not tracing.enabled()
    app = stead.App("plain")

    @app.workflow(version=1)
    async def hello(run: stead.Run) -> str:
        return str(await run.step("hi", lambda: "hello"))

    client = stead.Client(store, app)
    info = await client.start(hello)
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id) == "hello"
