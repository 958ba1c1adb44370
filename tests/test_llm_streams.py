"""Streamed OpenAI answers, offline through the SDK's own transport: the
journal holds the API's own JSON, streamed or not, on both APIs (none of the
streaming helpers' fields, which a next turn would send back), and a call's
`on_text=run.stream(...)` makes the adapter stream its deltas to the run's
durable stream."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

import stead
from stead.llm import openai as so

FIXTURES = Path(__file__).parent / "fixtures" / "llm"
# The streaming helpers' own fields: never in the API's JSON.
HELPERS_ONLY = ("index", "parsed", "parsed_arguments")


def _client(stream: str | None, nonstream: dict[str, Any] | None,
            sent: list[dict[str, Any]]) -> openai.AsyncOpenAI:
    def answer(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        sent.append(body)
        if body.get("stream"):
            assert stream is not None
            return httpx2.Response(200, text=(FIXTURES / stream).read_text(),
                                   headers={"content-type": "text/event-stream",
                                            "x-request-id": "req_stream"})
        assert nonstream is not None
        return httpx2.Response(200, json=nonstream["body"], headers=nonstream["headers"])

    return openai.AsyncOpenAI(api_key="sk-test",
                              http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(answer)))


def _keys(found: Any) -> set[str]:
    """Every key anywhere in a JSON value."""
    if isinstance(found, dict):
        return set(found) | {k for v in found.values() for k in _keys(v)}
    if isinstance(found, list):
        return {k for v in found for k in _keys(v)}
    return set()


async def _journaled(store: stead.Store, llm: stead.Model) -> tuple[dict[str, Any],
                                                                     list[dict[str, Any]]]:
    """The raw answer journaled for one call, and what a next turn sends back of it."""
    app = stead.App("streams")

    @app.workflow(version=1)
    async def ask(run: stead.Run) -> list[dict[str, Any]]:
        c = await run.llm("ask", llm, [{"role": "user", "content": "weather?"}])
        assert (c.tool_calls[0].name, c.tool_calls[0].arguments) == ("get_weather",
                                                                      {"city": "Paris"})
        if isinstance(llm, so.OpenAIChat):
            return [so.assistant_message(c)]
        return so.output_items(c)

    client = stead.Client(store, app)
    info = await client.start(ask)
    await stead.Worker(app, store).run_until_idle()
    sent = await client.result(info.run_id)
    [record] = [r for r in await client.journal(info.run_id) if r.kind == "llm"]
    return json.loads(record.payload)["raw"], sent


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("streamed", [True, False])
async def test_the_journal_holds_the_api_s_own_json_streamed_or_not(
    api: str, streamed: bool, store: stead.Store,
) -> None:
    [turn, _] = json.loads((FIXTURES / f"openai_{api}.json").read_text())
    requests: list[dict[str, Any]] = []
    http = _client(f"openai_{api}_tools_stream.sse", turn, requests)
    llm: stead.Model = (so.OpenAIChat(http, model="gpt-4o-mini", stream=streamed)
                        if api == "chat" else
                        so.OpenAIResponses(http, model="gpt-4.1-mini", stream=streamed))
    raw, sent = await _journaled(store, llm)
    assert requests[0].get("stream", False) is streamed
    assert not _keys(raw) & {"parsed", "parsed_arguments"}
    if api == "chat":
        call = raw["choices"][0]["message"]["tool_calls"][0]
        api_call = turn["body"]["choices"][0]["message"]["tool_calls"][0]
        assert set(call) == set(api_call) and set(call["function"]) == set(api_call["function"])
        assert not _keys(sent) & set(HELPERS_ONLY)
    else:
        item = raw["output"][0]
        assert set(item) == set(turn["body"]["output"][0])
        assert not _keys(sent) & set(HELPERS_ONLY)


def test_what_a_next_turn_sends_back_is_cleaned_of_an_older_record_s_helper_fields() -> None:
    raw = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "index": 0,
         "function": {"name": "f", "arguments": "{}", "parsed_arguments": None}}]}}]}
    c = stead.Completion(text="", raw=raw, provider="openai")
    assert so.assistant_message(c)["tool_calls"] == [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    items = stead.Completion(text="", raw={"output": [
        {"type": "function_call", "call_id": "c", "arguments": "{}",
         "parsed_arguments": None}]}, provider="openai")
    assert so.output_items(items) == [{"type": "function_call", "call_id": "c",
                                       "arguments": "{}"}]


async def test_a_call_s_on_text_streams_its_deltas_to_the_run_s_stream(
    store: stead.Store,
) -> None:
    requests: list[dict[str, Any]] = []
    llm = so.OpenAIChat(_client("openai_chat_stream.sse", None, requests), model="gpt-4o-mini")
    app = stead.App("streams")

    @app.workflow(version=1)
    async def ask(run: stead.Run) -> str:
        answer = await run.llm("ask", llm, [{"role": "user", "content": "weather?"}],
                               on_text=run.stream("answer"))
        await run.stream("answer").close()
        return answer.text

    client = stead.Client(store, app)
    info = await client.start(ask)
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id) == "It is 18 C in Paris."
    assert requests[0]["stream"] is True and "on_text" not in requests[0]
    entries = [e async for e in client.read_stream(info.run_id, "answer")]
    assert [e.value for e in entries] == ["It is ", "18 C ", "in Paris.", None]
