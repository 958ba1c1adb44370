"""stead.contrib.pydantic_ai, in process: pydantic-ai's durable operations as
stead steps, its durable external wait as a stead wait."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent, InstrumentationSettings
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.models.function import FunctionModel

import stead
from stead.contrib.pydantic_ai import SteadDurability
from stead.contrib.pydantic_ai import run as run_agent
from tests.workers import agents_app, pydantic_app

pytestmark = pytest.mark.usefixtures("sdk_dir")



async def test_parallel_calls_finishing_in_reverse_order_replay_identically(
    store: stead.Store,
) -> None:
    client = stead.Client(store, pydantic_app.app)
    info = await client.start(pydantic_app.weather_twice, "Paris")
    await stead.Worker(pydantic_app.app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    assert agents_app.lines("model.log") == ["asked", "asked"]
    names = [r.name for r in await store.load_journal(info.run_id)
             if r.status != stead.records.RecordStatus.STARTED]
    assert names[0] == names[3] == "weather__model.request"
    # asked in the order temperature, forecast; finished the other way round
    assert agents_app.lines("tools.log") == ["temperature started", "forecast", "temperature"]
    assert names[1:3] == ["forecast", "temperature"]  # the tools' own names
    [w] = await client.waits(run_id=info.run_id)
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1", payload={})
    await stead.Worker(pydantic_app.app, store).run_until_idle()
    result = await client.result(info.run_id, timeout=5)
    assert result["answer"] == "Paris: 12C / Paris: rain"
    assert result["run_id"].startswith(info.run_id)  # the same id on replay
    assert result["tokens"] > 0  # usage comes back from the journal
    assert len(agents_app.lines("model.log")) == 2  # nothing asked again
    assert len(agents_app.lines("tools.log")) == 3  # nothing run again


async def test_a_durable_external_wait_is_a_stead_wait(store: stead.Store, sdk_dir: Path) -> None:
    client = stead.Client(store, pydantic_app.app)
    info = await client.start(pydantic_app.refund_order, "123")
    await stead.Worker(pydantic_app.app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"  # suspended, no worker
    asked = json.loads((sdk_dir / "approval.json").read_text())
    assert asked["calls"] == ["call_refund"]
    [w] = await client.waits(run_id=info.run_id)
    assert w.kind == "approve"
    assert agents_app.lines("ledger.log") == []
    wrong = await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e0",
                                 token="stk_wrong", payload={})
    assert isinstance(wrong, stead.Rejected)
    ok = await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1",
                              token=asked["token"],
                              payload={"approvals": {"call_refund": True}})
    assert isinstance(ok, stead.Accepted)
    await stead.Worker(pydantic_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == \
        "done: refunded 4200 on order 123"
    assert agents_app.lines("ledger.log") == ["123 4200"]
    assert agents_app.lines("model.log") == ["asked", "asked"]


async def test_outside_a_stead_run_the_capability_does_nothing() -> None:
    result = await pydantic_app.weather_agent.run("weather in Paris")
    assert result.output == "Paris: 12C / Paris: rain"



async def test_an_agent_without_the_capability_is_refused(store: stead.Store) -> None:
    app = stead.App("refuse")
    plain = Agent(FunctionModel(pydantic_app.weather_model), name="plain")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        return str((await run_agent(run, plain, "weather")).output)

    info = await stead.Client(store, app).start(wf)
    await stead.Worker(app, store).run_until_idle()
    failed = await stead.Client(store).get(info.run_id)
    assert failed.status == "failed" and "SteadDurability" in str(failed.error)
    assert agents_app.lines("model.log") == []


async def test_replayed_work_emits_no_span(store: stead.Store) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traced = Agent(FunctionModel(pydantic_app.weather_model), name="weather",
                   tools=[pydantic_app.temperature, pydantic_app.forecast],
                   capabilities=[SteadDurability(), Instrumentation(
                       InstrumentationSettings(tracer_provider=provider))])
    app = stead.App("traced")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        result = await run_agent(run, traced, "weather in Paris")
        await (await run.wait("done", token=False))
        return result.output

    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store).run_until_idle()
    live = [s.name for s in exporter.get_finished_spans()]
    assert sum(n.startswith("chat") for n in live) == 2 and len(live) > 2
    exporter.clear()
    [w] = await client.waits(run_id=info.run_id)
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1", payload={})
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "Paris: 12C / Paris: rain"
    assert [s.name for s in exporter.get_finished_spans()] == []  # all of it was replayed


async def test_a_denied_call_never_runs(store: stead.Store, sdk_dir: Path) -> None:
    client = stead.Client(store, pydantic_app.app)
    info = await client.start(pydantic_app.refund_order, "123")
    await stead.Worker(pydantic_app.app, store).run_until_idle()
    asked = json.loads((sdk_dir / "approval.json").read_text())
    [w] = await client.waits(run_id=info.run_id)
    no = await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1",
                              token=asked["token"], payload={"approvals": {"call_refund": False}})
    assert isinstance(no, stead.Accepted)
    await stead.Worker(pydantic_app.app, store).run_until_idle()
    answer = await client.result(info.run_id, timeout=5)
    assert answer.startswith("done: The tool call was denied")
    assert agents_app.lines("ledger.log") == []


async def test_a_timeout_counts_from_the_recorded_start(store: stead.Store) -> None:
    app = stead.App("timed")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        result = await run_agent(run, pydantic_app.weather_agent, "weather", timeout=600)
        await (await run.wait("done", token=False))
        return result.output

    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store).run_until_idle()
    [start] = [r for r in await store.load_journal(info.run_id) if r.kind == "now"]
    [w] = await client.waits(run_id=info.run_id)
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1", payload={})
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "Paris: 12C / Paris: rain"
    assert [r.seq for r in await store.load_journal(info.run_id) if r.kind == "now"] == [
        start.seq]  # the replay read the recorded start, it did not take a new one
