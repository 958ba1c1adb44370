"""The `Model` protocol and the normalised completion every adapter returns."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    # The arguments as the provider sent them, when it sends text (OpenAI
    # does): kept as it came, also when it is not a JSON object, in which
    # case `arguments` is empty. None when the provider sends an object.
    raw_arguments: str | None = None

    @classmethod
    def parsed(cls, id: str, name: str, text: str) -> ToolCall:
        """A call whose arguments came as text: parsed if they are a JSON
        object, else kept only as text (a model may emit broken JSON)."""
        try:
            value = json.loads(text) if text else {}
        except ValueError:
            value = None
        return cls(id, name, value if isinstance(value, dict) else {}, text)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.raw_arguments is not None:
            data["raw_arguments"] = self.raw_arguments
        return data


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one model call. `input_tokens` counts every prompt token,
    cached ones included (`cached_tokens` says how many of them were read
    from the provider's cache); `reasoning_tokens` are part of `output_tokens`."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        data = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}
        if self.cached_tokens:
            data["cached_tokens"] = self.cached_tokens
        if self.reasoning_tokens:
            data["reasoning_tokens"] = self.reasoning_tokens
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Usage:
        return cls(*(int(data.get(k) or 0) for k in (
            "input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens")))


@dataclasses.dataclass(frozen=True, slots=True)
class Completion:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    model: str = ""
    stop_reason: str = ""
    # What a provider adapter adds (see `stead.llm.openai`, `stead.llm.anthropic`):
    # the provider's own JSON of the response, from which the SDK's typed
    # object is rebuilt; the request id the provider gave it (a header, not
    # part of the body); the provider's name. Records without them load with
    # the defaults.
    raw: Mapping[str, Any] | None = None
    request_id: str | None = None
    provider: str = ""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "text": self.text,
            "tool_calls": [c.to_json() for c in self.tool_calls],
            "usage": self.usage.to_json(),
            "model": self.model,
            "stop_reason": self.stop_reason,
        }
        if self.provider:
            data["provider"] = self.provider
        if self.request_id is not None:
            data["request_id"] = self.request_id
        if self.raw is not None:
            data["raw"] = self.raw
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Completion:
        raw = data.get("raw")
        return cls(
            text=data.get("text", ""),
            tool_calls=tuple(
                ToolCall(id=c["id"], name=c["name"], arguments=dict(c["arguments"]),
                         raw_arguments=c.get("raw_arguments"))
                for c in data.get("tool_calls", ())
            ),
            usage=Usage.from_json(data.get("usage") or {}),
            model=data.get("model", ""),
            stop_reason=data.get("stop_reason", ""),
            raw=raw if isinstance(raw, dict) else None,
            request_id=data.get("request_id"),
            provider=data.get("provider", ""),
        )


@runtime_checkable
class Model(Protocol):
    """Anything that can complete a conversation. `name` enters the call's
    digest, so switching models under a checkpoint is detected on replay.

    A model may also define `digest_params(params) -> Mapping` (the provider
    adapters do): what of a call, besides its messages, enters the digest in
    place of the call's own keyword arguments (its provider, model and
    defaults, without what only changes how the answer travels)."""

    name: str

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], **params: Any
    ) -> Completion: ...
