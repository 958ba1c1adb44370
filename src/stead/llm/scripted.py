"""A model that answers from a script: for tests and the demo (no network)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stead import errors
from stead.llm.model import Completion

Reply = str | Completion | Callable[[Sequence[Mapping[str, Any]]], Completion]


class ScriptedModel:
    def __init__(self, replies: Sequence[Reply], *, name: str = "scripted") -> None:
        self.name = name
        self._replies = list(replies)
        self.calls: list[list[dict[str, Any]]] = []

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], **params: Any
    ) -> Completion:
        index = len(self.calls)
        self.calls.append([dict(m) for m in messages])
        if index >= len(self._replies):
            raise errors.ScriptExhausted(
                f"scripted model {self.name!r} has {len(self._replies)} replies and was "
                f"asked for reply {index + 1}; give its script a reply for every call the "
                "workflow makes"
            )
        reply = self._replies[index]
        if isinstance(reply, str):
            return Completion(text=reply, model=self.name, stop_reason="end")
        if isinstance(reply, Completion):
            return reply
        return reply(messages)
