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
    ModelRequestId,
    ToolsetCallToolId,
    ToolsetValidateToolArgumentsId,
    record_durable_unit,
)
from pydantic_ai.tools import RunContext

from stead.contrib._scope import safe_key
from stead.contrib.pydantic_ai import _binding, _conversation


def _tool_call(operation_id: DurableOperationId, cache_key: tuple[object, ...]
               ) -> tuple[str, Any, str | None] | None:
    """For a tool call (or its argument validation): its address, its
    arguments and its step's name. The name is the tool's (`forecast`, or
    `validate forecast`), not pydantic-ai's operation name, which spells out
    its toolset's internals and may change between its versions."""
    if not isinstance(operation_id, ToolsetCallToolId | ToolsetValidateToolArgumentsId):
        return None
    ctx = next((c for c in cache_key if isinstance(c, RunContext)), None)
    if ctx is None or not ctx.tool_call_id:
        return None
    calls = isinstance(operation_id, ToolsetCallToolId)
    arguments = cache_key[1] if len(cache_key) > 1 else None
    tool = ctx.tool_name
    name = None if not tool else tool if calls else f"validate {tool}"
    return ("t:" if calls else "v:") + safe_key(ctx.tool_call_id), arguments, name


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
        digested: tuple[Any, ...] = ()
        if call is not None:
            key, digested, name = call[0], (call[1],), call[2] or name
        else:
            key = "o:" + binding.scope.next(name)
        said = _conversation.said(operation_id, cache_key) \
            if isinstance(operation_id, ModelRequestId) else None
        with binding.scope.at(key):
            result = await (binding.run.step(name, live, *digested) if said is None
                            else binding.run.model_step(name, live, said=said))
        # pydantic-ai's instrumentation leaves out the spans and token metrics
        # of work that was only replayed (see `replay_scope` in `run`).
        record_durable_unit(executed=bool(ran))
        return result
