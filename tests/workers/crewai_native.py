"""CrewAI's native OpenAI and Anthropic clients, offline, for the tests and
their worker processes: the provider is an httpx `MockTransport` given to
the SDK's clients, answering the refund clerk's turns with native tool calls
(`lookup_order`, then `refund`, then the answer), as JSON or, when the LLM
streams, as server-sent events; each request is a line in model.log. Adds a
workflow to `crewai_app.app` whose crew asks OpenAI's client, streamed."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
from crewai import LLM

import stead
from stead.contrib import crewai as sc
from tests.workers import crewai_app

app = crewai_app.app
Answer = Callable[[Any, bool], httpx.Response]


def _said(request: httpx.Request) -> tuple[Any, bool]:
    """What the clerk answers the request with: a tool to call (name,
    arguments) or its final text; and whether it is asked to stream."""
    body = json.loads(request.content)
    crewai_app.log("model.log", "asked (streamed)" if body.get("stream") else "asked")
    said = json.dumps(body["messages"])
    if "rf_123" in said:
        turn: Any = "Refunded order 123: rf_123."
    elif "4200" in said:
        turn = ("refund", {"order_id": "123", "amount": 4200})
    else:
        turn = ("lookup_order", {"order_id": "123"})
    return turn, bool(body.get("stream"))


def _events(*events: dict[str, Any], done: bool = True, named: bool = False) -> httpx.Response:
    """Server-sent events; `named`: each with its type as its event name (Anthropic's)."""
    text = "".join((f"event: {e['type']}\n" if named else "") + f"data: {json.dumps(e)}\n\n"
                   for e in events)
    return httpx.Response(200, text=text + ("data: [DONE]\n\n" if done else ""),
                          headers={"content-type": "text/event-stream", "x-request-id": "req_s"})


def openai_answer(turn: Any, streamed: bool) -> httpx.Response:
    head = {"id": "chatcmpl-1", "created": 1, "model": "gpt-4o-mini"}
    usage = {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}
    calls = [] if isinstance(turn, str) else [{
        "id": f"call_{turn[0]}", "type": "function",
        "function": {"name": turn[0], "arguments": json.dumps(turn[1])}}]
    finish = "stop" if isinstance(turn, str) else "tool_calls"
    if streamed:
        chunk = {**head, "object": "chat.completion.chunk"}
        delta = {"role": "assistant", "content": turn} if isinstance(turn, str) else {
            "role": "assistant", "tool_calls": [{"index": 0, **calls[0]}]}
        return _events(
            {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
            {**chunk, "choices": [], "usage": usage})
    message: dict[str, Any] = {"role": "assistant",
                               "content": turn if isinstance(turn, str) else None}
    if calls:
        message["tool_calls"] = calls
    return httpx.Response(200, headers={"x-request-id": "req_1"}, json={
        **head, "object": "chat.completion", "usage": usage,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}]})


def anthropic_answer(turn: Any, streamed: bool) -> httpx.Response:
    block = {"type": "text", "text": turn} if isinstance(turn, str) else {
        "type": "tool_use", "id": f"toolu_{turn[0]}", "name": turn[0], "input": turn[1]}
    stop = "end_turn" if isinstance(turn, str) else "tool_use"
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
               "content": [block], "stop_reason": stop, "stop_sequence": None,
               "usage": {"input_tokens": 30, "output_tokens": 9}}
    if not streamed:
        return httpx.Response(200, headers={"request-id": "req_1"}, json=message)
    if isinstance(turn, str):
        started, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": turn}
    else:
        started = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(turn[1])}
    return _events(
        {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}},
        {"type": "content_block_start", "index": 0, "content_block": started},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
         "usage": {"output_tokens": 9}},
        {"type": "message_stop"}, done=False, named=True)


def native(provider: str, answer: Answer, stream: bool) -> Any:
    """CrewAI's native client for `provider`, its SDK sending to the mock."""
    def handler(request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith(("/chat/completions", "/messages")):
            return httpx.Response(404, json={"error": {"message": "not here"}})  # token counts
        return answer(*_said(request))

    llm = LLM(model=f"{provider}/{'gpt-4o-mini' if provider == 'openai' else 'claude-x'}",
              api_key="sk-offline", stream=stream, max_tokens=1024)
    if provider == "openai":
        import openai

        sync, async_ = openai.OpenAI, openai.AsyncOpenAI
    else:
        import anthropic  # the crewai extra's, for CrewAI's native Anthropic client

        sync, async_ = anthropic.Anthropic, anthropic.AsyncAnthropic
    llm._client = sync(api_key="sk-offline", max_retries=0,
                       http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    llm._async_client = async_(api_key="sk-offline", max_retries=0, http_client=httpx.AsyncClient(
        transport=httpx.MockTransport(handler)))
    return llm


@app.workflow(version=1)
async def refund_order_native(run: stead.Run, order_id: str) -> str:
    """The refund clerk on OpenAI's own client, streamed."""
    crew = crewai_app.crew(llm=native("openai", openai_answer, stream=True))
    output = await sc.kickoff(run, crew, {"order_id": order_id},
                              on_approval=crewai_app.ask_for_approval)
    return str(output.raw)
