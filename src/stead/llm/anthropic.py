"""Anthropic models for `run.llm` (`pip install -e '.[anthropic]'`): the
Messages API (`AnthropicMessages`).

The journal keeps the message's own JSON, its request id and normalised
usage; `message(c)` gives the SDK's typed `Message` back, equal to the
original, live and on replay alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

try:
    import anthropic
    from anthropic.types import Message
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("stead.llm.anthropic needs the anthropic SDK: "
                      "pip install -e '.[anthropic]' in stead's checkout (docs/install.md)"
                      ) from exc

from stead.llm import _provider
from stead.llm._provider import OnText, number
from stead.llm.model import Completion, ToolCall, Usage

PROVIDER = "anthropic"

# The errors worth another attempt under `retry=stead.Retry(on=TRANSIENT)`:
# rate limits (429), overload (529) and the server's failures, a dropped or
# slow connection.
TRANSIENT: tuple[type[BaseException], ...] = (
    anthropic.RateLimitError, anthropic.InternalServerError, anthropic.APIConnectionError)


class AnthropicMessages(_provider.Adapter):
    """`client.messages.create(model=model, max_tokens=max_tokens,
    messages=..., **defaults, **params)` for an `anthropic.AsyncAnthropic`
    client. `stream=True` streams it (`on_text` gets each text delta as it
    arrives) and journals the SDK's accumulated message; a replay returns it
    at once, with no deltas. The SDK's own retries are off (`max_retries=0`):
    use `run.llm(..., retry=stead.Retry(on=stead.llm.anthropic.TRANSIENT))`."""

    provider = PROVIDER
    api = "messages"

    def __init__(self, client: Any, *, model: str, max_tokens: int, max_retries: int = 0,
                 stream: bool = False, on_text: OnText | None = None, **defaults: Any) -> None:
        self.client = _provider.sdk_client(type(self).__name__, client, max_retries)
        super().__init__(model=model, stream=stream, on_text=on_text,
                         sentinels=(anthropic.NotGiven, anthropic.Omit),
                         defaults={"max_tokens": max_tokens, **defaults})

    async def _created(self, messages: list[Mapping[str, Any]], request: dict[str, Any]
                       ) -> Completion:
        answer = await self.client.messages.create(messages=messages, **request)
        found = getattr(answer, "_request_id", None)
        return _message(answer.to_dict(mode="json"), found if isinstance(found, str) else None)

    async def _streamed(self, messages: list[Mapping[str, Any]], request: dict[str, Any]
                        ) -> Completion:
        async with self.client.messages.stream(messages=messages, **request) as stream:
            async for delta in stream.text_stream:
                await self.text(delta)
            final = await stream.get_final_message()
            request_id = stream.request_id
        raw = final.to_dict(mode="json")
        for block in raw.get("content") or ():  # the helper's own field, not the API's
            if isinstance(block, dict):
                block.pop("parsed_output", None)
        return _message(raw, request_id)


def _message(raw: dict[str, Any], request_id: str | None) -> Completion:
    text: list[str] = []
    calls = []
    for block in raw.get("content") or ():
        if block.get("type") == "text":
            text.append(block.get("text", ""))
        elif block.get("type") == "tool_use":
            args = block.get("input")
            calls.append(ToolCall(block.get("id", ""), block.get("name", ""),
                                  dict(args) if isinstance(args, dict) else {}))
    usage = raw.get("usage")
    cached = number(usage, "cache_read_input_tokens")
    return Completion(
        text="".join(text),
        tool_calls=tuple(calls),
        # Anthropic counts cache reads and writes apart from `input_tokens`.
        usage=Usage(number(usage, "input_tokens") + cached
                    + number(usage, "cache_creation_input_tokens"),
                    number(usage, "output_tokens"), cached),
        model=str(raw.get("model") or ""),
        stop_reason=str(raw.get("stop_reason") or ""),
        raw=raw, request_id=request_id, provider=PROVIDER,
    )


def message(completion: Completion) -> Message:
    """The SDK's `Message` of a completion made by `AnthropicMessages`."""
    return _provider.rebuild(Message, completion, PROVIDER)


def assistant_message(completion: Completion) -> dict[str, Any]:
    """The assistant turn of a message, to append to the conversation: its
    content blocks as they came (text, tool use, thinking)."""
    if completion.raw is None:
        raise ValueError("this completion holds no Anthropic message")
    return {"role": "assistant", "content": list(completion.raw.get("content") or ())}


def tool_results(results: Sequence[tuple[ToolCall, str]]) -> dict[str, Any]:
    """The user turn answering tool calls: one `tool_result` block per call."""
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call.id, "content": content}
        for call, content in results]}


__all__ = ["TRANSIENT", "AnthropicMessages", "assistant_message", "message", "tool_results"]
