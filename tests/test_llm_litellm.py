"""The LiteLLM adapter (`stead.llm.LiteLLM`), in-process, offline: LiteLLM's
own `mock_response` stands for the provider and a LiteLLM callback counts the
requests it sends. What is journaled (usage, the provider's request id),
what a replay returns (LiteLLM's typed answer, no request), digests,
streaming, and rate limits retried by stead, not by LiteLLM."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import litellm
import pytest
from litellm.integrations.custom_logger import CustomLogger

import stead
from stead.llm import litellm as sl
from stead.records import RecordKind, RecordStatus, RunStatus
from tests import sdk_agents
from tests.helpers import crash_then_resume

# LiteLLM's Anthropic types warn, when first built, of a pydantic limit they live with.
pytestmark = pytest.mark.filterwarnings("ignore:Items? .* the `ReadOnly` qualifier:UserWarning")
ASK = [{"role": "user", "content": "Weather in Paris?"}]
WEATHER = {"id": "call_1", "type": "function",
           "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}


class Sent(CustomLogger):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.models: list[str] = []

    def log_pre_api_call(self, model: str, messages: Any, kwargs: Any) -> None:
        self.models.append(model)


@pytest.fixture
def sent() -> Iterator[Sent]:
    """Every request LiteLLM sends, by model, while the test runs."""
    counter = Sent()
    litellm.callbacks.append(counter)
    yield counter
    litellm.callbacks.remove(counter)


def _answer(text: str, request_id: str) -> litellm.ModelResponse:
    """What a provider answers, with the request id its response header carried."""
    answer = litellm.ModelResponse(
        id="chatcmpl-1", model="claude-sonnet-4-6",
        choices=[{"index": 0, "finish_reason": "stop",
                  "message": {"role": "assistant", "content": text}}],
        usage={"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57,
               "prompt_tokens_details": {"cached_tokens": 30}})
    answer._hidden_params = {"additional_headers": {"llm_provider-request-id": request_id}}
    return answer


async def test_an_agent_resumes_without_asking_again_and_gets_its_typed_answers(
    fstore: stead.Store, clock: stead.FakeClock, sent: Sent,
) -> None:
    app = stead.App("litellm")
    model = stead.llm.LiteLLM("anthropic/claude-sonnet-4-6")
    crash_once = sdk_agents.crash_once()
    ran: list[str] = []

    def weather(city: str) -> str:
        ran.append(city)
        return f"18 C in {city}"

    @app.workflow(version=1)
    async def agent(run: stead.Run) -> str:
        convo: list[dict[str, Any]] = list(ASK)
        first = await run.llm("turn-1", model, convo, mock_response="",
                              mock_tool_calls=[WEATHER])
        convo.append(sl.assistant_message(first))
        for call in first.tool_calls:
            convo.append(sl.tool_message(call, await run.step(call.name, weather,
                                                              **call.arguments)))
        await run.step("boom", crash_once)  # the worker dies once the tool's result is durable
        second = await run.llm("turn-2", model, convo,
                               mock_response=_answer("It is 18 C in Paris.", "req_2"))
        return second.text

    client = stead.Client(fstore, app)
    info = await client.start(agent)
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id) == "It is 18 C in Paris."
    assert sent.models == ["claude-sonnet-4-6"] * 2  # one request per turn, over both workers
    assert ran == ["Paris"]
    records = [r for r in await client.journal(info.run_id) if r.kind == RecordKind.LLM]
    first, second = (stead.Completion.from_json(json.loads(r.payload)) for r in records)
    assert first.tool_calls == (stead.ToolCall("call_1", "weather", {"city": "Paris"},
                                               '{"city": "Paris"}'),)
    assert second.provider == "litellm" and second.request_id == "req_2"
    assert second.usage == stead.Usage(50, 7, 30, 0)
    typed = sl.model_response(second)  # LiteLLM's own object, rebuilt from the journal
    assert isinstance(typed, litellm.ModelResponse)
    assert typed.model_dump(mode="json") == second.raw
    assert typed.choices[0].message.content == "It is 18 C in Paris."
    assert typed.usage.prompt_tokens_details.cached_tokens == 30


async def test_a_streamed_answer_is_journaled_whole_and_replayed_without_deltas(
    fstore: stead.Store, clock: stead.FakeClock, sent: Sent,
) -> None:
    deltas: list[str] = []
    model = stead.llm.LiteLLM("openai/gpt-4o-mini", stream=True, on_text=deltas.append)
    app = stead.App("litellm-stream")
    crash_once = sdk_agents.crash_once()

    @app.workflow(version=1)
    async def ask(run: stead.Run) -> str:
        answer = await run.llm("ask", model, ASK, mock_response="Sunny in Paris today.")
        await run.step("boom", crash_once)
        return answer.text

    client = stead.Client(fstore, app)
    info = await client.start(ask)
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id) == "Sunny in Paris today."
    assert "".join(deltas) == "Sunny in Paris today." and len(deltas) > 1  # live only
    assert len(sent.models) == 1
    [record] = [r for r in await client.journal(info.run_id) if r.kind == RecordKind.LLM]
    completion = stead.Completion.from_json(json.loads(record.payload))
    assert completion.usage.output_tokens > 0  # usage asked for in the stream
    assert sl.model_response(completion).choices[0].message.content == completion.text


async def test_a_rate_limit_is_journaled_and_retried_by_stead_not_by_litellm(
    store: stead.Store, sent: Sent,
) -> None:
    model = stead.llm.LiteLLM("openai/gpt-4o-mini")
    app = stead.App("litellm-limits")

    @app.workflow(version=1)
    async def ask(run: stead.Run) -> str:
        answer = await run.llm("ask", model, ASK, mock_response="litellm.RateLimitError",
                               retry=stead.Retry(attempts=2, backoff=0.01, on=sl.TRANSIENT))
        return answer.text

    client = stead.Client(store, app)
    info = await client.start(ask)
    await stead.Worker(app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == RunStatus.FAILED
    assert len(sent.models) == 2  # one request per journaled attempt: LiteLLM's retries off
    journal = [r for r in await client.journal(info.run_id) if r.kind == RecordKind.LLM]
    assert [(r.attempt, r.status) for r in journal] == [(1, RecordStatus.ERROR),
                                                        (2, RecordStatus.ERROR)]


def test_the_digest_covers_what_is_asked_not_where_or_with_what_key() -> None:
    a = stead.llm.LiteLLM("openai/gpt-4o-mini", temperature=0, api_key="sk-secret")
    shape = a.digest_params({"tools": [], "timeout": 3, "api_base": "http://proxy",
                             "mock_response": "hi", "metadata": {"user": "ann"}})
    assert shape == {"provider": "litellm", "api": "completion",
                     "request": {"model": "openai/gpt-4o-mini", "temperature": 0, "tools": []}}
    assert "sk-secret" not in json.dumps(shape)
    b = stead.llm.LiteLLM("anthropic/claude-sonnet-4-6", temperature=0)
    assert b.digest_params({"tools": []}) != shape
    assert a.name == "litellm:openai/gpt-4o-mini"


def test_bad_arguments_say_what_to_pass() -> None:
    with pytest.raises(ValueError, match="model="):
        stead.llm.LiteLLM("")
    with pytest.raises(ValueError, match="stream=True"):
        stead.llm.LiteLLM("openai/gpt-4o-mini", on_text=print)
    with pytest.raises(TypeError, match=r"litellm\.Router"):
        stead.llm.LiteLLM("openai/gpt-4o-mini", router=object())
    with pytest.raises(ValueError, match=r"not made by stead\.llm\.LiteLLM"):
        sl.model_response(stead.Completion(text="x"))


async def test_a_router_sends_the_request(store: stead.Store, sent: Sent) -> None:
    router = litellm.Router(model_list=[{"model_name": "fast", "litellm_params": {
        "model": "openai/gpt-4o-mini", "api_key": "sk-offline", "mock_response": "hi"}}])
    completion = await stead.llm.LiteLLM("fast", router=router).complete(ASK)
    assert completion.text == "hi" and sent.models == ["gpt-4o-mini"]


async def test_one_call_streams_to_its_own_sink(sent: Sent) -> None:
    deltas: list[str] = []
    model = stead.llm.LiteLLM("openai/gpt-4o-mini")  # not streaming, but this call is
    completion = await model.complete(ASK, on_text=deltas.append, mock_response="Rain later.")
    assert "".join(deltas) == completion.text == "Rain later." and len(sent.models) == 1
