"""Recorded OpenAI and Anthropic answers served through the SDKs' own
transport (`http_client=httpx2.AsyncClient(transport=MockTransport(...))`),
and a two-tool agent written for each API. Used in-process by
tests/test_llm_adapters.py and by the worker processes of
tests/workers/agent_worker.py."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai

import stead
from stead.llm import anthropic as sa
from stead.llm import openai as so

FIXTURES = Path(__file__).with_name("fixtures") / "llm"
PROVIDERS = ("openai_chat", "openai_responses", "anthropic_messages")
QUESTION = "What is the weather and the time in Paris?"


def turns(provider: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads((FIXTURES / f"{provider}.json").read_text())
    return data


def append_line(path: Path | None, line: str) -> None:
    """One write(2) on an O_APPEND descriptor: lines from processes never interleave."""
    if path is None:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _turn(provider: str, body: dict[str, Any]) -> int:
    """Which recorded turn a request asks for: the second once tool results are in it."""
    if provider == "openai_chat":
        return int(any(m.get("role") == "tool" for m in body["messages"]))
    if provider == "openai_responses":
        return int(any(i.get("type") == "function_call_output" for i in body["input"]))
    return int(any(isinstance(m.get("content"), list)
                   and any(b.get("type") == "tool_result" for b in m["content"])
                   for m in body["messages"]))


class Recorded:
    """A mock transport answering each request with its recorded turn (or
    with `status` for the first `fail` requests), logging every request."""

    def __init__(self, provider: str, log: Path | None = None, *, fail: int = 0,
                 status: int = 429, retry_after: str = "0") -> None:
        self.provider = provider
        self.turns = turns(provider)
        self.log = log
        self.requests: list[dict[str, Any]] = []
        self.fail = fail
        self.status = status
        self.retry_after = retry_after

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        append_line(self.log, f"{self.provider} {request.url.path}")
        if self.fail > 0:
            self.fail -= 1
            return httpx2.Response(self.status, json={"error": {
                "type": "rate_limit_error", "message": "slow down"}},
                headers={"retry-after": self.retry_after})
        if body.get("stream"):
            header = "request-id" if self.provider.startswith("anthropic") else "x-request-id"
            return httpx2.Response(200, text=(FIXTURES / f"{self.provider}_stream.sse").read_text(),
                                   headers={"content-type": "text/event-stream",
                                            header: f"req_{self.provider}_stream"})
        turn = self.turns[_turn(self.provider, body)]
        return httpx2.Response(200, json=turn["body"], headers=turn["headers"])

    def http(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self))

    def client(self) -> Any:
        if self.provider.startswith("openai"):
            return openai.AsyncOpenAI(api_key="sk-test", http_client=self.http())
        return anthropic.AsyncAnthropic(api_key="sk-ant-test", http_client=self.http())


def model(provider: str, client: Any, **kw: Any) -> stead.Model:
    if provider == "openai_chat":
        return stead.llm.OpenAIChat(client, model="gpt-4o-mini", **kw)
    if provider == "openai_responses":
        return stead.llm.OpenAIResponses(client, model="gpt-4.1-mini", **kw)
    return stead.llm.AnthropicMessages(client, model="claude-sonnet-4-6", max_tokens=1024, **kw)


# -- the tools -------------------------------------------------------------------------
class ToolLog:
    path: Path | None = None


def get_weather(city: str) -> dict[str, Any]:
    append_line(ToolLog.path, f"get_weather {city}")
    return {"city": city, "celsius": 18}


def get_time(city: str) -> dict[str, Any]:
    append_line(ToolLog.path, f"get_time {city}")
    return {"city": city, "time": "14:05"}


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {"get_weather": get_weather,
                                                   "get_time": get_time}
_PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
SPECS = {
    "openai_chat": [{"type": "function", "function": {"name": n, "parameters": _PARAMS}}
                    for n in TOOLS],
    "openai_responses": [{"type": "function", "name": n, "parameters": _PARAMS} for n in TOOLS],
    "anthropic_messages": [{"name": n, "input_schema": _PARAMS} for n in TOOLS],
}


# -- the agent: ask, run each tool the model calls as a step, ask again -----------------
async def agent(run: stead.Run, provider: str, llm: stead.Model) -> str:
    tools = SPECS[provider]
    convo: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    first = await run.llm("turn-1", llm, convo, tools=tools)
    results = []
    for call in first.tool_calls:
        out = await run.step(f"tool:{call.name}", TOOLS[call.name], **call.arguments)
        results.append((call, json.dumps(out)))
    if provider == "openai_chat":
        convo += [so.assistant_message(first), *(so.tool_message(c, o) for c, o in results)]
    elif provider == "openai_responses":
        convo += [*so.output_items(first), *(so.tool_output(c, o) for c, o in results)]
    else:
        convo += [sa.assistant_message(first), sa.tool_results(results)]
    second = await run.llm("turn-2", llm, convo, tools=tools)
    return second.text


def typed(provider: str, completion: stead.Completion) -> Any:
    """The SDK's typed response of a completion."""
    if provider == "openai_chat":
        return so.chat_completion(completion)
    if provider == "openai_responses":
        return so.response(completion)
    return sa.message(completion)


async def originals(provider: str) -> list[Any]:
    """The SDK's own parse of each recorded turn, asked directly (no stead)."""
    rec = Recorded(provider)
    client = rec.client()
    found = []
    user = [{"role": "user", "content": QUESTION}]
    if provider == "openai_chat":
        found.append(await client.chat.completions.create(model="gpt-4o-mini", messages=user))
        found.append(await client.chat.completions.create(
            model="gpt-4o-mini", messages=[*user, {"role": "tool", "tool_call_id": "x",
                                                    "content": "{}"}]))
    elif provider == "openai_responses":
        found.append(await client.responses.create(model="gpt-4.1-mini", input=user))
        found.append(await client.responses.create(model="gpt-4.1-mini", input=[
            *user, {"type": "function_call_output", "call_id": "x", "output": "{}"}]))
    else:
        found.append(await client.messages.create(model="claude-sonnet-4-6", max_tokens=1024,
                                                  messages=user))
        found.append(await client.messages.create(
            model="claude-sonnet-4-6", max_tokens=1024, messages=[*user, {
                "role": "user", "content": [{"type": "tool_result", "tool_use_id": "x",
                                             "content": "{}"}]}]))
    return found


def crash_once() -> Callable[[], None]:
    """A step function that raises `Crash` (the worker dies) the first time only."""
    from tests.helpers import Crash

    crashed: list[bool] = []

    def step() -> None:
        if not crashed:
            crashed.append(True)
            raise Crash()

    return step


async def ask_once(store: stead.Store, llm: stead.Model, content: str = "hi"
                   ) -> tuple[stead.Client, str, str]:
    """Run a workflow asking `llm` once to its end: (client, run id, answer text)."""
    app = stead.App("ask-once")

    @app.workflow(version=1)
    async def ask(run: stead.Run) -> str:
        return (await run.llm("ask", llm, [{"role": "user", "content": content}])).text

    client = stead.Client(store, app)
    info = await client.start(ask)
    await stead.Worker(app, store).run_until_idle()
    return client, info.run_id, await client.result(info.run_id)
