"""Offline stand-ins for the OpenAI and Anthropic APIs, for the examples: the
real SDK clients, whose HTTP transport answers from a script instead of the
network. The first turn calls the first tool offered with `{"city": "Paris"}`;
once tool results are in the conversation, the answer quotes them."""

from __future__ import annotations

import json
import tempfile
from typing import Any

import httpx2

import stead

ARGS = {"city": "Paris"}


def _results(messages: list[dict[str, Any]]) -> list[str]:
    found = []
    for m in messages:
        if m.get("role") == "tool":
            found.append(str(m["content"]))
        elif isinstance(m.get("content"), list):
            found += [str(b["content"]) for b in m["content"] if b.get("type") == "tool_result"]
    return found


def _openai(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    said = _results(body["messages"])
    message: dict[str, Any] = {"role": "assistant", "content": f"The tools said: {said}"}
    if not said:
        name = body["tools"][0]["function"]["name"]
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": name, "arguments": json.dumps(ARGS)}}]}
    return httpx2.Response(200, headers={"x-request-id": "req_scripted"}, json={
        "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0,
        "model": body["model"], "choices": [{"index": 0, "message": message,
                                             "finish_reason": "stop" if said else "tool_calls"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}})


def _anthropic(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    said = _results(body["messages"])
    content: list[dict[str, Any]] = [{"type": "text", "text": f"The tools said: {said}"}]
    if not said:
        content = [{"type": "tool_use", "id": "toolu_1", "name": body["tools"][0]["name"],
                    "input": ARGS}]
    message = {"id": "msg_scripted", "type": "message", "role": "assistant",
               "model": body["model"], "content": content,
               "stop_reason": "end_turn" if said else "tool_use", "stop_sequence": None,
               "usage": {"input_tokens": 20, "output_tokens": 10}}
    headers = {"request-id": "req_scripted"}
    if not body.get("stream"):
        return httpx2.Response(200, headers=headers, json=message)
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {**message,
                                                                          "content": []}}]
    for i, block in enumerate(content):
        start = {**block, "text": ""} if block["type"] == "text" else {**block, "input": {}}
        events.append({"type": "content_block_start", "index": i, "content_block": start})
        delta = {"type": "text_delta", "text": block["text"]} if block["type"] == "text" \
            else {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [{"type": "content_block_delta", "index": i, "delta": delta},
                   {"type": "content_block_stop", "index": i}]
    events += [{"type": "message_delta", "delta": {"stop_reason": message["stop_reason"]},
                "usage": {"output_tokens": 10}}, {"type": "message_stop"}]
    sse = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    return httpx2.Response(200, headers={**headers, "content-type": "text/event-stream"},
                           text=sse)


def openai_client() -> Any:
    """An `openai.AsyncOpenAI` answering from the script."""
    import openai

    return openai.AsyncOpenAI(api_key="sk-offline", http_client=httpx2.AsyncClient(
        transport=httpx2.MockTransport(_openai)))


def anthropic_client() -> Any:
    """An `anthropic.AsyncAnthropic` answering from the script."""
    import anthropic

    return anthropic.AsyncAnthropic(api_key="sk-ant-offline", http_client=httpx2.AsyncClient(
        transport=httpx2.MockTransport(_anthropic)))


async def run_once(app: stead.App, workflow: Any, *args: Any) -> Any:
    """Start a run in a fresh SQLite database, work it to the end, return its result."""
    store = await stead.open_store(f"sqlite:///{tempfile.mkdtemp()}/stead.db")
    try:
        client = stead.Client(store, app)
        info = await client.start(workflow, *args)
        await stead.Worker(app, store).run_until_idle()
        return await client.result(info.run_id)
    finally:
        await store.close()
