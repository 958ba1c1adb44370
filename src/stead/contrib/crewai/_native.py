"""CrewAI's native OpenAI and Anthropic clients, journaled at their HTTP
transport.

A `crewai.LLM("openai/...")` or `LLM("anthropic/...")` without
`is_litellm=True` is CrewAI's own client class over the provider's SDK, which
sends each request through an httpx client. `journal(llm)` puts `Transport`
in front of that client's transport (once per SDK client): inside a stead
kickoff each request is a `run.llm` call whose answer is the provider's HTTP
answer as it came, its JSON, or its server-sent events when the request
streamed, together with the text, tool calls and usage read from it; on
replay the SDK gets that answer back and parses it as it parsed it live, to
the same typed objects and the same stream of events, and the provider is
not asked again. Outside a kickoff (and inside a step's or an effect's own
code, whose record covers it) requests go out as they are. A refusal (a 4xx
answer) is journaled like any answer, and the SDK raises its own error on
it, live and on replay; an answer worth asking again (408, 409, 429, 5xx) is
journaled as the call's error, so a retry asks again. The credentials
(headers) are neither journaled nor part of what is asked."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

import httpx

from stead import errors
from stead.contrib.crewai._session import Session, journaling
from stead.llm.model import Completion, Usage

# CrewAI's native classes stead journals, by class name: the provider each asks.
PROVIDERS = {"OpenAICompletion": "openai", "AnthropicCompletion": "anthropic"}
# What an answer keeps of its headers: what the SDK reads back (the request id).
_KEPT_HEADERS = ("content-type", "x-request-id", "request-id")
# Answers worth asking again (a timeout, a conflict, a rate limit; and 5xx):
# journaled as the call's error. Any other answer, a refusal included, is the
# provider's and is journaled as it came.
_TRANSIENT = frozenset({408, 409, 429})
_Send = Callable[[], Coroutine[Any, Any, httpx.Response]]


def provider_of(llm: Any) -> str | None:
    return PROVIDERS.get(type(llm).__name__)


def journal(llm: Any) -> None:
    """Journal `llm`'s requests: its SDK clients' transports (see the module)."""
    provider = provider_of(llm)
    if provider is None:
        raise TypeError(f"{type(llm).__name__} is not a native CrewAI client stead journals")
    for sdk in (llm._get_sync_client(), llm._get_async_client()):
        http = sdk._client  # the SDK's httpx client
        cls = AsyncTransport if isinstance(http, httpx.AsyncClient) else Transport
        http._transport = _wrapped(cls, http._transport, provider, str(llm.model))
        http._mounts = {k: None if t is None else _wrapped(cls, t, provider, str(llm.model))
                        for k, t in http._mounts.items()}


def _wrapped(cls: type[Transport | AsyncTransport], real: Any, provider: str, model: str
             ) -> Any:
    return real if isinstance(real, Transport | AsyncTransport) else cls(real, provider, model)


class Transport(httpx.BaseTransport):
    """A sync SDK client's transport (CrewAI calls it from its threads)."""

    def __init__(self, real: httpx.BaseTransport, provider: str, model: str) -> None:
        self.real, self.provider, self.model = real, provider, model

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        session = journaling()
        if session is None:
            return self.real.handle_request(request)

        async def send() -> httpx.Response:
            def sent() -> httpx.Response:
                answer = self.real.handle_request(request)
                answer.read()
                return answer

            return await asyncio.to_thread(sent)

        return session.blocking(asked(session, self.provider, self.model, request, send))

    def close(self) -> None:
        self.real.close()


class AsyncTransport(httpx.AsyncBaseTransport):
    """An async SDK client's transport."""

    def __init__(self, real: httpx.AsyncBaseTransport, provider: str, model: str) -> None:
        self.real, self.provider, self.model = real, provider, model

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = journaling()
        if session is None:
            return await self.real.handle_async_request(request)

        async def send() -> httpx.Response:
            answer = await self.real.handle_async_request(request)
            await answer.aread()
            return answer

        return await asked(session, self.provider, self.model, request, send)

    async def aclose(self) -> None:
        await self.real.aclose()


class HttpModel:
    """A `stead.llm.Model` that sends one SDK request as it is (`send`) and
    answers with what came back, read (see `completion`)."""

    def __init__(self, provider: str, model: str, path: str, send: _Send) -> None:
        self.name = f"{provider}:{model}"
        self.provider, self.path, self._send = provider, path, send

    def digest_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {"provider": self.provider, "api": self.path, "request": params.get("request")}

    async def complete(self, messages: Sequence[Mapping[str, Any]], **params: Any
                       ) -> Completion:
        answer = await self._send()
        body = answer.content.decode("utf-8", errors="replace")
        if answer.status_code in _TRANSIENT or answer.status_code >= 500:
            raise errors.SteadError(
                f"{self.provider} answered {answer.status_code} to {self.path}: {body[:500]}")
        headers = {k: answer.headers[k] for k in _KEPT_HEADERS if k in answer.headers}
        return completion(self.provider, answer.status_code, headers, body)


async def asked(session: Session, provider: str, model: str, request: httpx.Request,
                send: _Send) -> httpx.Response:
    """One SDK request as a journaled `run.llm` call; the answer the SDK reads."""
    body = json.loads(request.content or b"{}")
    if not isinstance(body, dict):
        raise errors.SteadError(f"a {provider} request stead cannot journal: its body is no "
                                "JSON object")
    given = body.get("messages", body.get("input"))
    messages = given if isinstance(given, list) else [{"role": "user", "content": given}]
    asked_for = {k: v for k, v in body.items()
                 if k not in ("messages", "input", "stream", "stream_options")}
    scope = session.scope
    with scope.at("m:" + scope.next("model")):
        done = await session.run.llm(
            f"model {model}", HttpModel(provider, model, request.url.path, send),
            [m if isinstance(m, dict) else {"content": m} for m in messages],
            request=asked_for)
    http = (done.raw or {}).get("http") or {}
    return httpx.Response(int(http.get("status", 200)), headers=http.get("headers") or {},
                          content=str(http.get("body", "")).encode(), request=request)


def completion(provider: str, status: int, headers: dict[str, str], body: str) -> Completion:
    """The journaled form of an HTTP answer: the answer itself under
    `raw["http"]`, and the text, tool calls and usage read from it (its JSON,
    or its server-sent events)."""
    read = _json_answer(provider, body) if "event-stream" not in headers.get(
        "content-type", "") else _streamed_answer(body)
    return Completion(text=read.text, tool_calls=read.tool_calls, usage=read.usage,
                      model=read.model, stop_reason=read.stop_reason,
                      raw={"http": {"status": status, "headers": headers, "body": body}},
                      request_id=headers.get("x-request-id") or headers.get("request-id"),
                      provider=provider)


def _json_answer(provider: str, body: str) -> Completion:
    try:
        raw = json.loads(body)
    except ValueError:
        return Completion(text="")
    if not isinstance(raw, dict):
        return Completion(text="")
    if provider == "anthropic" or raw.get("type") == "message":
        from stead.llm import anthropic  # needs the anthropic SDK, as CrewAI's class does

        return anthropic._message(raw, None)
    from stead.llm import openai

    return openai._response(raw, None) if raw.get("object") == "response" \
        else openai._chat(raw, None)


def _streamed_answer(body: str) -> Completion:
    """The text and usage of an answer streamed as server-sent events (Chat
    Completions' chunks, the Responses API's and Anthropic's events)."""
    text: list[str] = []
    usage: dict[str, int] = {}
    model = stop = ""
    for line in body.splitlines():
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        try:
            event = json.loads(line[5:])
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        delta = event.get("delta")
        if kind == "response.output_text.delta" and isinstance(delta, str):
            text.append(delta)
        elif kind == "content_block_delta" and isinstance(delta, dict):
            text.append(str(delta.get("text") or ""))
        for choice in event.get("choices") or ():
            text.append(str((choice.get("delta") or {}).get("content") or ""))
            stop = str(choice.get("finish_reason") or stop)
        found = event.get("usage") or (event.get("response") or {}).get("usage") \
            or (event.get("message") or {}).get("usage")
        if isinstance(found, dict):
            usage.update({k: v for k, v in found.items() if isinstance(v, int)})
        model = str(event.get("model") or (event.get("message") or {}).get("model") or model)
    return Completion(text="".join(text), model=model, stop_reason=stop, usage=Usage(
        usage.get("prompt_tokens", usage.get("input_tokens", 0)),
        usage.get("completion_tokens", usage.get("output_tokens", 0))))
