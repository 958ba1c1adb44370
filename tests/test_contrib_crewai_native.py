"""stead.contrib.crewai over CrewAI's native OpenAI and Anthropic clients,
offline: the provider is an httpx `MockTransport` given to the SDK's client
(`http_client=`), answering the clerk's turns as JSON or, when the crew's
LLM streams, as server-sent events. A crew killed after its first tool ran
resumes without asking a recorded turn again; the SDK parses the recorded
answer on replay as it parsed it live. Skipped where CrewAI is missing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("crewai")

import httpx
from crewai import LLM

import stead
from stead.contrib import crewai as sc
from stead.records import RecordKind
from tests.helpers import crash_then_resume
from tests.workers import crewai_app

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:Items? .* the `ReadOnly` qualifier:UserWarning")]

Answer = Callable[[Any, bool], httpx.Response]


@pytest.fixture(autouse=True)
def _folder(sdk_dir: Path) -> Path:
    return sdk_dir


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
        import openai as sdk

        sync, async_ = sdk.OpenAI, sdk.AsyncOpenAI
    else:
        sdk = pytest.importorskip("anthropic")
        sync, async_ = sdk.Anthropic, sdk.AsyncAnthropic
    llm._client = sync(api_key="sk-offline", max_retries=0,
                       http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    llm._async_client = async_(api_key="sk-offline", max_retries=0, http_client=httpx.AsyncClient(
        transport=httpx.MockTransport(handler)))
    return llm


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
@pytest.mark.parametrize(("provider", "answer"), [("openai", openai_answer),
                                                  ("anthropic", anthropic_answer)],
                         ids=["openai", "anthropic"])
async def test_a_native_clients_crew_killed_in_its_first_tool_asks_no_recorded_turn_again(
    fstore: stead.Store, clock: stead.FakeClock, provider: str, answer: Answer, stream: bool,
) -> None:
    llm = native(provider, answer, stream)
    app = stead.App(f"native-{provider}")
    lookup = crewai_app.dying_lookup()  # its worker dies after it ran, once

    @app.workflow(version=1)
    async def refund_order(run: stead.Run) -> str:
        crew = crewai_app.crew(lookup, llm=llm)
        return str((await sc.kickoff(run, crew, {"order_id": "123"})).raw)

    client = stead.Client(fstore, app)
    info = await client.start(refund_order)
    await crash_then_resume(app, fstore, clock)
    run = await client.get(info.run_id)
    assert run.status == "waiting", run.error  # for the refund's approval
    asked = "asked (streamed)" if stream else "asked"
    assert crewai_app.lines("model.log") == [asked, asked]  # the first turn asked once
    assert crewai_app.lines("tools.log") == ["lookup 123", "lookup 123"]
    models = [stead.Completion.from_json(json.loads(r.payload))
              for r in await client.journal(info.run_id)
              if r.kind == RecordKind.LLM and r.status == "ok"
              and json.loads(r.payload)["raw"]["http"]["status"] == 200]  # not the token counts
    assert [m.provider for m in models] == [provider, provider]
    assert models[0].usage.input_tokens == 30 and models[0].request_id in ("req_1", "req_s")
    if not stream:  # the tool calls, read from the answer as the SDK parsed it
        assert [[c.name for c in m.tool_calls] for m in models] == [["lookup_order"],
                                                                     ["refund"]]
    [w] = await client.waits(run_id=info.run_id)
    assert isinstance(await client.deliver(info.run_id, wait_id=w.wait_id, event_id="ok",
                                           payload={"approved": True},
                                           bind=json.loads(w.bind)), stead.Accepted)
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id) == "Refunded order 123: rf_123."
    assert crewai_app.lines("model.log") == [asked] * 3
    assert crewai_app.lines("ledger.log") == ["123 4200 refund-123"]
