"""The `Model` protocol and the normalised completion every adapter returns."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Completion:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    model: str = ""
    stop_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ],
            "usage": {
                "input_tokens": self.usage.input_tokens,
                "output_tokens": self.usage.output_tokens,
            },
            "model": self.model,
            "stop_reason": self.stop_reason,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Completion:
        usage = data.get("usage") or {}
        return cls(
            text=data.get("text", ""),
            tool_calls=tuple(
                ToolCall(id=c["id"], name=c["name"], arguments=dict(c["arguments"]))
                for c in data.get("tool_calls", ())
            ),
            usage=Usage(int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))),
            model=data.get("model", ""),
            stop_reason=data.get("stop_reason", ""),
        )


@runtime_checkable
class Model(Protocol):
    """Anything that can complete a conversation. `name` enters the call's
    digest, so switching models under a checkpoint is detected on replay."""

    name: str

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], **params: Any
    ) -> Completion: ...
