"""The OpenAI and Anthropic adapters, in-process, against recorded answers
served through the SDKs' own transport: what is journaled, what a replay
returns (the SDK's typed object, equal to the original, with no request),
digests, usage and budgets, streaming and rate limits."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pydantic
import pytest
from openai.types.chat import ChatCompletion

import stead
import stead.retry
from stead.llm import anthropic as sa
from stead.llm import openai as so
from stead.records import RecordKind, RecordStatus, RunStatus
from tests import sdk_agents
from tests.helpers import Crash, crash_then_resume
from tests.sdk_agents import PROVIDERS, Recorded


def _agent_app(provider: str, rec: Recorded, crash_after_first_tool: list[bool]) -> Any:
    app = stead.App("agents")
    llm = sdk_agents.model(provider, rec.client())
    real = dict(sdk_agents.TOOLS)

    def crashing(name: str) -> Any:
        def tool(city: str) -> dict[str, Any]:
            if crash_after_first_tool and crash_after_first_tool[0] and name == "get_time":
                crash_after_first_tool[0] = False
                raise Crash()  # the worker dies after the first tool's result is journaled
            return real[name](city)
        return tool

    @app.workflow(version=1)
    async def agent(run: stead.Run) -> str:
        saved = dict(sdk_agents.TOOLS)
        sdk_agents.TOOLS.update({n: crashing(n) for n in real})
        try:
            return await sdk_agents.agent(run, provider, llm)
        finally:
            sdk_agents.TOOLS.update(saved)

    return app, agent


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_agent_resumes_without_asking_again_and_its_typed_answers_come_back(
        provider: str, fstore: stead.Store, clock: stead.FakeClock) -> None:
    rec = Recorded(provider)
    app, agent = _agent_app(provider, rec, [True])
    client = stead.Client(fstore, app)
    info = await client.start(agent)
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id) == "It is 18 C and 14:05 in Paris."
    assert len(rec.requests) == 2  # one per turn, over both workers
    journal = await client.journal(info.run_id)
    llm = [r for r in journal if r.kind == RecordKind.LLM]
    completions = [stead.Completion.from_json(json.loads(r.payload)) for r in llm]
    originals = await sdk_agents.originals(provider)
    for completion, original in zip(completions, originals, strict=True):
        rebuilt = sdk_agents.typed(provider, completion)
        assert rebuilt == original and type(rebuilt) is type(original)
        assert rebuilt._request_id == original._request_id == completion.request_id
        assert completion.provider == provider.split("_")[0]
    assert [c.name for c in completions[0].tool_calls] == ["get_weather", "get_time"]
    assert completions[0].tool_calls[0].arguments == {"city": "Paris"}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_recorded_answer_lacking_a_field_the_sdk_now_requires_still_replays(
        provider: str) -> None:
    rec = Recorded(provider)
    completion = await sdk_agents.model(provider, rec.client()).complete(
        [{"role": "user", "content": sdk_agents.QUESTION}])
    again = stead.Completion.from_json(json.loads(json.dumps(completion.to_json())))
    typed = sdk_agents.typed(provider, again)
    with pytest.raises(pydantic.ValidationError):
        type(typed).model_validate(completion.raw)
    assert typed == sdk_agents.typed(provider, completion)
    assert again == completion


def test_usage_is_normalised_per_provider() -> None:
    chat = so._chat(sdk_agents.turns("openai_chat")[0]["body"], "r")
    assert chat.usage == stead.Usage(82, 41, 64, 0)
    resp = so._response(sdk_agents.turns("openai_responses")[0]["body"], "r")
    assert resp.usage == stead.Usage(90, 40, 0, 16)
    msg = sa._message(sdk_agents.turns("anthropic_messages")[0]["body"], "r")
    assert msg.usage == stead.Usage(500, 60, 200, 0)  # cache reads count as input
    assert msg.text == "Let me look both up."


def test_old_records_load_and_a_budget_counts_new_ones() -> None:
    old = {"text": "x", "tool_calls": [{"id": "1", "name": "f", "arguments": {"a": 1}}],
           "usage": {"input_tokens": 3, "output_tokens": 4}, "model": "m", "stop_reason": "s"}
    c = stead.Completion.from_json(old)
    assert c.raw is None and c.request_id is None and c.provider == ""
    assert c.to_json() == old  # a completion without provider data journals as before


def test_tool_arguments_that_are_not_json_are_kept_as_they_came() -> None:
    body = json.loads(json.dumps(sdk_agents.turns("openai_chat")[0]["body"]))
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"city": "Par'
    c = so._chat(body, None)
    assert c.tool_calls[0].arguments == {} and c.tool_calls[0].raw_arguments == '{"city": "Par'
    again = stead.Completion.from_json(json.loads(json.dumps(c.to_json())))
    assert again.tool_calls == c.tool_calls
    assert so.assistant_message(again)["tool_calls"][0]["function"]["arguments"] == '{"city": "Par'


async def test_the_digest_covers_provider_model_and_request_without_sentinels() -> None:
    rec = Recorded("openai_chat")
    a = stead.llm.OpenAIChat(rec.client(), model="gpt-4o-mini", temperature=0)
    b = stead.llm.OpenAIChat(rec.client(), model="gpt-4o", temperature=0)
    c = stead.llm.OpenAIChat(rec.client(), model="gpt-4o-mini", temperature=1)
    base = a.digest_params({"tools": [], "seed": openai.NOT_GIVEN, "top_p": openai.omit,
                            "timeout": 3})
    assert base == {"provider": "openai", "api": "chat.completions",
                    "request": {"model": "gpt-4o-mini", "temperature": 0, "tools": []}}
    assert b.digest_params({"tools": []}) != base and c.digest_params({"tools": []}) != base
    anth = stead.llm.AnthropicMessages(Recorded("anthropic_messages").client(),
                                       model="gpt-4o-mini", max_tokens=5, temperature=0)
    assert anth.digest_params({"tools": []})["provider"] == "anthropic"


async def test_a_changed_model_under_a_recorded_call_stops_the_run(
        fstore: stead.Store, clock: stead.FakeClock) -> None:
    rec = Recorded("openai_chat")
    app = stead.App("swap")
    models = {"m": stead.llm.OpenAIChat(rec.client(), model="gpt-4o-mini")}
    crash_once = sdk_agents.crash_once()

    @app.workflow(version=1)
    async def ask(run: stead.Run) -> str:
        answer = await run.llm("ask", models["m"], [{"role": "user", "content": "hi"}])
        await run.step("boom", crash_once)
        return answer.text

    client = stead.Client(fstore, app)
    info = await client.start(ask)
    first = stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30))
    await first.run_until_idle()
    models["m"] = stead.llm.OpenAIChat(rec.client(), model="gpt-4o")
    clock.advance(31)
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    run = await client.get(info.run_id)
    assert run.status == RunStatus.INCOMPATIBLE
    assert len(rec.requests) == 1


async def test_a_budget_counts_the_tokens_an_adapter_journaled(
        store: stead.Store) -> None:
    rec = Recorded("openai_chat")
    app = stead.App("budget")
    llm = stead.llm.OpenAIChat(rec.client(), model="gpt-4o-mini")

    @app.workflow(version=1)
    async def twice(run: stead.Run) -> str:
        # A token budget reserves each call's estimate (its messages and its
        # max_tokens) before it is sent: 9 + 20 fit in 100, 123 + 22 do not.
        await run.llm("one", llm, [{"role": "user", "content": "hi"}], max_tokens=20)
        await run.llm("two", llm, [{"role": "user", "content": "again"}], max_tokens=20)
        return "done"

    client = stead.Client(store, app)
    info = await client.start(twice, intent=stead.Intent(goal="g", budget=stead.Budget(
        tokens=100)))
    await stead.Worker(app, store).run_until_idle()
    run = await client.get(info.run_id)
    assert run.status == RunStatus.PAUSED  # 82 + 41 tokens spent by the first call
    assert len(rec.requests) == 1


# -- rate limits: stead's Retry, not the SDK's ---------------------------------------------
@pytest.mark.parametrize("provider", ["openai_chat", "anthropic_messages"])
async def test_a_429_is_journaled_and_retried_under_stead_retry(
        provider: str, store: stead.Store) -> None:
    rec = Recorded(provider, fail=1)
    llm = sdk_agents.model(provider, rec.client())
    transient = so.TRANSIENT if provider.startswith("openai") else sa.TRANSIENT
    app = stead.App("limits")

    @app.workflow(version=1)
    async def ask(run: stead.Run) -> str:
        answer = await run.llm("ask", llm, [{"role": "user", "content": "hi"}],
                               retry=stead.Retry(attempts=3, backoff=0.01, on=transient))
        return answer.text

    client = stead.Client(store, app)
    info = await client.start(ask)
    await stead.Worker(app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == RunStatus.COMPLETED
    assert len(rec.requests) == 2  # the SDK did not retry on its own
    journal = [r for r in await client.journal(info.run_id) if r.kind == RecordKind.LLM]
    assert [(r.attempt, r.status) for r in journal] == [(1, RecordStatus.ERROR),
                                                        (2, RecordStatus.OK)]
    assert json.loads(journal[0].payload)["type"] == "RateLimitError"
    assert json.loads(journal[0].payload)["retry_at"] is not None


async def test_the_backoff_after_a_429_survives_a_restart(
        fstore: stead.Store, clock: stead.FakeClock) -> None:
    rec = Recorded("openai_chat", fail=1)
    llm = stead.llm.OpenAIChat(rec.client(), model="gpt-4o-mini")
    app = stead.App("limits")

    @app.workflow(version=1)
    async def ask(run: stead.Run) -> str:
        answer = await run.llm("ask", llm, [{"role": "user", "content": "hi"}],
                               retry=stead.Retry(attempts=3, backoff=600, max_backoff=600,
                                                 on=so.TRANSIENT))
        return answer.text

    client = stead.Client(fstore, app)
    info = await client.start(ask)
    await stead.Worker(app, fstore).run_until_idle()  # 429, then suspended for the backoff
    assert (await client.get(info.run_id)).status == RunStatus.WAITING
    clock.advance(300)
    await stead.Worker(app, fstore).run_until_idle()  # a new worker: half the backoff left
    assert len(rec.requests) == 1
    clock.advance(301)
    await stead.Worker(app, fstore).run_until_idle()
    assert (await client.get(info.run_id)).status == RunStatus.COMPLETED
    assert len(rec.requests) == 2


async def test_a_429_waits_at_least_what_its_retry_after_asks(
        fstore: stead.Store, clock: stead.FakeClock) -> None:
    rec = Recorded("anthropic_messages", fail=1, retry_after="120")
    llm = sdk_agents.model("anthropic_messages", rec.client())
    app = stead.App("limits")

    @app.workflow(version=1)
    async def ask(run: stead.Run) -> str:
        answer = await run.llm("ask", llm, [{"role": "user", "content": "hi"}],
                               retry=stead.Retry(attempts=3, backoff=1, on=sa.TRANSIENT))
        return answer.text

    client = stead.Client(fstore, app)
    info = await client.start(ask)
    await stead.Worker(app, fstore).run_until_idle()
    [failed] = await client.journal(info.run_id)
    assert json.loads(failed.payload)["retry_at"] == failed.at + 120  # not the 1 s backoff
    clock.advance(121)
    await stead.Worker(app, fstore).run_until_idle()
    assert (await client.get(info.run_id)).status == RunStatus.COMPLETED


def test_retry_after_is_read_in_seconds_or_as_a_date() -> None:
    class Failed(Exception):
        def __init__(self, value: str | None) -> None:
            self.response = httpx2.Response(429, headers={} if value is None else {
                "retry-after": value})

    now = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC
    assert stead.retry.retry_after(Failed("7"), now) == 7.0
    assert stead.retry.retry_after(Failed("Thu, 01 Jan 2026 00:00:30 GMT"), now) == 30.0
    assert stead.retry.retry_after(Failed("soon"), now) is None
    assert stead.retry.retry_after(Failed(None), now) is None
    assert stead.retry.retry_after(ValueError("no response"), now) is None
    capped = stead.Retry(backoff=1, max_backoff=60).retry_at(1, Failed("3600"), now)
    assert capped == now + 60


def test_the_sdk_retries_are_off_unless_asked_for() -> None:
    client = Recorded("openai_chat").client()
    assert stead.llm.OpenAIChat(client, model="m").client.max_retries == 0
    assert stead.llm.OpenAIChat(client, model="m", max_retries=2).client.max_retries == 2
    with pytest.raises(TypeError, match="async client"):
        stead.llm.OpenAIChat(openai.OpenAI(api_key="k"), model="m")
    with pytest.raises(ValueError, match="stream=True"):
        stead.llm.OpenAIChat(client, model="m", on_text=print)


def test_a_completion_of_another_provider_has_no_typed_response() -> None:
    c = stead.Completion(text="x")
    with pytest.raises(ValueError, match="no openai response"):
        so.chat_completion(c)
    assert isinstance(so.chat_completion(so._chat(sdk_agents.turns("openai_chat")[1]["body"],
                                                  None)), ChatCompletion)


# -- streaming ----------------------------------------------------------------------------
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_streamed_text_reaches_the_callback_live_and_a_replay_has_no_deltas(
        provider: str, fstore: stead.Store, clock: stead.FakeClock) -> None:
    rec = Recorded(provider)
    deltas: list[tuple[int, str]] = []
    attempt = [1]

    async def on_text(delta: str) -> None:
        deltas.append((attempt[0], delta))

    llm = sdk_agents.model(provider, rec.client(), stream=True, on_text=on_text)
    app = stead.App("streams")
    crash_once = sdk_agents.crash_once()

    @app.workflow(version=1)
    async def ask(run: stead.Run) -> dict[str, Any]:
        answer = await run.llm("ask", llm, [{"role": "user", "content": "weather?"}])
        await run.step("after", crash_once)
        return {"text": answer.text, "raw": answer.raw, "id": answer.request_id,
                "usage": answer.usage.to_json()}

    client = stead.Client(fstore, app)
    info = await client.start(ask)
    first = stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30))
    await first.run_until_idle()
    assert deltas == [(1, "It is "), (1, "18 C "), (1, "in Paris.")]
    attempt[0] = 2
    clock.advance(31)
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    result = await client.result(info.run_id)
    assert len(rec.requests) == 1 and rec.requests[0]["stream"] is True
    assert [d for a, d in deltas if a == 2] == []  # the replay returned the final message at once
    assert result["text"] == "It is 18 C in Paris."
    assert result["id"] == f"req_{provider}_stream"
    assert result["usage"] == {"input_tokens": 20, "output_tokens": 7}
    typed = sdk_agents.typed(provider, stead.Completion.from_json(
        {"text": "", "raw": result["raw"], "provider": provider.split("_")[0]}))
    assert typed.to_dict(mode="json") == result["raw"]
