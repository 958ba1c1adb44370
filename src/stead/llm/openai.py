"""OpenAI models for `run.llm` (`pip install -e '.[openai]'`): the Chat
Completions API (`OpenAIChat`) and the Responses API (`OpenAIResponses`).

The journal keeps the response's own JSON, its request id and normalised
usage; `chat_completion(c)` and `response(c)` give the SDK's typed object
back, equal to the original, live and on replay alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    import openai
    from openai.types.chat import ChatCompletion
    from openai.types.responses import Response
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("stead.llm.openai needs the openai SDK: pip install -e '.[openai]' in "
                      "stead's checkout (docs/install.md)") from exc

from stead import warmups
from stead.llm import _provider
from stead.llm._provider import OnText, number
from stead.llm.model import Completion, ToolCall, Usage

PROVIDER = "openai"

# The errors worth another attempt under `retry=stead.Retry(on=TRANSIENT)`:
# rate limits (429), the server's failures, a dropped or slow connection.
TRANSIENT: tuple[type[BaseException], ...] = (
    openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)


def _request_id(obj: Any) -> str | None:
    found = getattr(obj, "_request_id", None)
    return found if isinstance(found, str) else None


def _stream_request_id(stream: Any) -> str | None:
    # The streaming helpers keep the HTTP response, whose header names the request.
    headers = getattr(getattr(stream, "_response", None), "headers", None)
    found = headers.get("x-request-id") if headers is not None else None
    return found if isinstance(found, str) else None


class _OpenAI(_provider.Adapter):
    """What both OpenAI APIs share: the client, the sentinels of the openai SDK."""

    provider = PROVIDER

    def __init__(self, client: Any, *, model: str, max_retries: int = 0, stream: bool = False,
                 on_text: OnText | None = None, **defaults: Any) -> None:
        self.client = _provider.sdk_client(type(self).__name__, client, max_retries)
        super().__init__(model=model, stream=stream, on_text=on_text,
                         sentinels=(openai.NotGiven, openai.Omit),
                         defaults=defaults)


class OpenAIChat(_OpenAI):
    """`client.chat.completions.create(model=model, messages=..., **defaults,
    **params)` for an `openai.AsyncOpenAI` client. `stream=True` streams it
    (`on_text` gets each text delta as it arrives) and journals the SDK's
    accumulated completion; a replay returns it at once, with no deltas.
    The SDK's own retries are off (`max_retries=0`): use `run.llm(...,
    retry=stead.Retry(on=stead.llm.openai.TRANSIENT))`."""

    api = "chat.completions"

    async def _created(self, messages: list[Mapping[str, Any]], request: dict[str, Any]
                       ) -> Completion:
        answer = await self.client.chat.completions.create(messages=messages, **request)
        return _chat(answer.to_dict(mode="json"), _request_id(answer))

    async def _streamed(self, messages: list[Mapping[str, Any]], request: dict[str, Any]
                        ) -> Completion:
        request.setdefault("stream_options", {"include_usage": True})  # usage counts for budgets
        async with self.client.chat.completions.stream(messages=messages, **request) as stream:
            async for event in stream:
                if event.type == "content.delta":
                    await self.text(event.delta)
            final = await stream.get_final_completion()
        return _chat(_chat_json(final.to_dict(mode="json")), _stream_request_id(stream))


class OpenAIResponses(_OpenAI):
    """`client.responses.create(model=model, input=..., **defaults, **params)`:
    the messages are the response's `input` items. `stream=True` and
    `on_text` as for `OpenAIChat`."""

    api = "responses"

    async def _created(self, messages: list[Mapping[str, Any]], request: dict[str, Any]
                       ) -> Completion:
        answer = await self.client.responses.create(input=messages, **request)
        return _response(answer.to_dict(mode="json"), _request_id(answer))

    async def _streamed(self, messages: list[Mapping[str, Any]], request: dict[str, Any]
                        ) -> Completion:
        async with self.client.responses.stream(input=messages, **request) as stream:
            async for event in stream:
                if event.type == "response.output_text.delta":
                    await self.text(event.delta)
            final = await stream.get_final_response()
        return _response(_responses_json(final.to_dict(mode="json")), _stream_request_id(stream))


# The streaming helpers' own fields, which the API never sends and a request
# must not send back: the parsed message and arguments (parsing is the
# caller's), and a tool call's place in the chunks it was streamed in.
def _chat_json(raw: dict[str, Any]) -> dict[str, Any]:
    """A streamed Chat Completions answer as the API's JSON."""
    for choice in raw.get("choices") or ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict):
            message.pop("parsed", None)
            for call in message.get("tool_calls") or ():
                _tool_call_json(call)
    return raw


def _tool_call_json(call: Any) -> Any:
    if isinstance(call, dict):
        call.pop("index", None)
        if isinstance(call.get("function"), dict):
            call["function"].pop("parsed_arguments", None)
    return call


def _responses_json(raw: dict[str, Any]) -> dict[str, Any]:
    """A streamed Responses answer as the API's JSON."""
    for item in raw.get("output") or ():
        _item_json(item)
    return raw


def _item_json(item: Any) -> Any:
    if isinstance(item, dict):
        item.pop("parsed_arguments", None)
        for part in item.get("content") or ():
            if isinstance(part, dict):
                part.pop("parsed", None)
    return item


def _chat(raw: dict[str, Any], request_id: str | None, provider: str = PROVIDER) -> Completion:
    """A Chat Completions answer normalised: also what LiteLLM answers with,
    whatever provider it reached (`stead.llm.litellm`)."""
    choices = raw.get("choices") or [{}]
    message = choices[0].get("message") or {}
    calls = []
    for call in message.get("tool_calls") or ():
        if call.get("type") == "custom":
            custom = call.get("custom") or {}
            calls.append(ToolCall(call.get("id", ""), custom.get("name", ""), {},
                                  str(custom.get("input", ""))))
        else:
            function = call.get("function") or {}
            calls.append(ToolCall.parsed(call.get("id", ""), function.get("name", ""),
                                         str(function.get("arguments") or "")))
    usage = raw.get("usage")
    return Completion(
        text=message.get("content") or "",
        tool_calls=tuple(calls),
        usage=Usage(number(usage, "prompt_tokens"), number(usage, "completion_tokens"),
                    number(usage, "prompt_tokens_details", "cached_tokens"),
                    number(usage, "completion_tokens_details", "reasoning_tokens")),
        model=str(raw.get("model") or ""),
        stop_reason=str(choices[0].get("finish_reason") or ""),
        raw=raw, request_id=request_id, provider=provider,
    )


def _response(raw: dict[str, Any], request_id: str | None) -> Completion:
    text: list[str] = []
    calls = []
    for item in raw.get("output") or ():
        if item.get("type") == "message":
            text.extend(part.get("text", "") for part in item.get("content") or ()
                        if part.get("type") == "output_text")
        elif item.get("type") == "function_call":
            calls.append(ToolCall.parsed(item.get("call_id", ""), item.get("name", ""),
                                         str(item.get("arguments") or "")))
    usage = raw.get("usage")
    incomplete = raw.get("incomplete_details") or {}
    return Completion(
        text="".join(text),
        tool_calls=tuple(calls),
        usage=Usage(number(usage, "input_tokens"), number(usage, "output_tokens"),
                    number(usage, "input_tokens_details", "cached_tokens"),
                    number(usage, "output_tokens_details", "reasoning_tokens")),
        model=str(raw.get("model") or ""),
        stop_reason=str(incomplete.get("reason") or raw.get("status") or ""),
        raw=raw, request_id=request_id, provider=PROVIDER,
    )


def chat_completion(completion: Completion) -> ChatCompletion:
    """The SDK's `ChatCompletion` of a completion made by `OpenAIChat`."""
    return _provider.rebuild(ChatCompletion, completion, PROVIDER)


def response(completion: Completion) -> Response:
    """The SDK's `Response` of a completion made by `OpenAIResponses`."""
    return _provider.rebuild(Response, completion, PROVIDER)


def assistant_message(completion: Completion) -> dict[str, Any]:
    """The assistant message of a Chat Completions answer, to append to the
    conversation: its text and its tool calls, arguments as they came."""
    if completion.raw is None:
        raise ValueError("this completion holds no OpenAI response")
    message = dict((completion.raw.get("choices") or [{}])[0].get("message") or {})
    sent: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):  # as the API sent them (a record may predate `_chat_json`)
        sent["tool_calls"] = [_tool_call_json(dict(call) if isinstance(call, dict) else call)
                              for call in message["tool_calls"]]
    return sent


def tool_message(call: ToolCall, content: str) -> dict[str, Any]:
    """The Chat Completions message answering `call` with `content`."""
    return {"role": "tool", "tool_call_id": call.id, "content": content}


def output_items(completion: Completion) -> list[dict[str, Any]]:
    """The output items of a Responses answer, to append to the next `input`."""
    if completion.raw is None:
        raise ValueError("this completion holds no OpenAI response")
    # As the API sent them (a record may predate `_responses_json`).
    return [_item_json(dict(item)) for item in completion.raw.get("output") or ()]


def tool_output(call: ToolCall, output: str) -> dict[str, Any]:
    """The Responses input item answering `call` with `output`."""
    return {"type": "function_call_output", "call_id": call.id, "output": output}


def _warm() -> None:
    """The typed answers' schemas, which the SDK builds on first use."""
    for cls in (ChatCompletion, Response):
        cls.model_rebuild()


warmups.register(_warm)

__all__ = ["TRANSIENT", "OpenAIChat", "OpenAIResponses", "assistant_message", "chat_completion",
           "output_items", "response", "tool_message", "tool_output"]
