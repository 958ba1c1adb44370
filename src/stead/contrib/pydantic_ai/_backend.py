"""pydantic-ai's durable operations (model requests, tool calls, discovery,
event handling) as stead steps.

Each operation is one `run.step` holding its result in pydantic-ai's JSON
codec (`JSON_CODEC`: its own `TypeAdapter`s, `ModelResponse` included). A tool
call's step is addressed by its tool-call id, so parallel calls replay in any
completion order; the other operations, which the agent makes one after the
other, by their name and how many came before."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai.durable_exec import (
    DurableOperationId,
    JournalCallableOperationBackend,
    ToolsetCallToolId,
    ToolsetValidateToolArgumentsId,
    record_durable_unit,
)
from pydantic_ai.tools import RunContext

from stead.contrib._scope import safe_key
from stead.contrib.pydantic_ai import _binding


def _tool_call(operation_id: DurableOperationId, cache_key: tuple[object, ...]
               ) -> tuple[str, Any] | None:
    """For a tool call (or its argument validation): its address and its arguments."""
    if not isinstance(operation_id, ToolsetCallToolId | ToolsetValidateToolArgumentsId):
        return None
    call_id = next((c.tool_call_id for c in cache_key if isinstance(c, RunContext)), None)
    if not call_id:
        return None
    prefix = "t:" if isinstance(operation_id, ToolsetCallToolId) else "v:"
    arguments = cache_key[1] if len(cache_key) > 1 else None
    return prefix + safe_key(call_id), arguments


class Backend(JournalCallableOperationBackend[None]):
    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: None,
    ) -> object:
        binding = _binding.current(f"pydantic-ai operation {name!r}")
        ran: list[bool] = []

        async def live(*_digested: Any) -> Any:
            ran.append(True)
            with _binding.bound(None):
                return await body()

        call = _tool_call(operation_id, cache_key)
        key, digested = (call[0], (call[1],)) if call is not None else (
            "o:" + binding.scope.next(name), ())
        with binding.scope.at(key):
            result = await binding.run.step(name, live, *digested)
        # pydantic-ai's instrumentation leaves out the spans and token metrics
        # of work that was only replayed (see `replay_scope` in `run`).
        record_durable_unit(executed=bool(ran))
        return result
