"""Function tools, journaled: a call is a `run.step` (or, for a tool made by
`effect_tool`, a write-ahead `run.effect`) addressed by its tool-call id, so
parallel calls replay whatever order they finished in."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from agents import FunctionTool, function_tool
from agents.tool_context import ToolContext

import stead
from stead import errors
from stead.contrib._scope import safe_key
from stead.contrib.openai_agents._session import Session

# The run an effect tool's body acts in: set around the tool's invocation.
_SESSION: ContextVar[Session | None] = ContextVar("stead_openai_agents_session", default=None)


@dataclasses.dataclass
class EffectTool(FunctionTool):
    """A function tool whose call is a `run.effect` (see `effect_tool`)."""


def effect_tool(
    fn: Callable[..., Any], *, check: Any = None, idempotent: bool = False,
    retry: stead.Retry | None = None, timeout: float | None = None, name: str | None = None,
    **tool_options: Any,
) -> FunctionTool:
    """A function tool whose call is a stead effect: `fn(op, **arguments)`
    runs at most once, its intent journaled before it runs, with `op.key` the
    idempotency key (the same on every attempt). After a crash an effect whose
    outcome is unknown is resent only if `idempotent`, else `check(op)` is
    asked, else the run stops for a person (`stead reconcile`). The model sees
    the parameters after `op`; `tool_options` go to `agents.function_tool`
    (`needs_approval=`, `description_override=`...)."""
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        raise TypeError(f"an effect tool's function takes the operation first: {fn!r}")
    hints = typing.get_type_hints(fn)
    tool_name = name or fn.__name__
    call = _caller(fn)
    shown = inspect.Signature(params[1:])

    async def body(*args: Any, **kwargs: Any) -> Any:
        arguments = dict(shown.bind(*args, **kwargs).arguments)
        session = _SESSION.get()
        if session is None:
            raise errors.SteadError(
                f"effect tool {tool_name!r} acts only in a stead run: run the agent with "
                "stead.contrib.openai_agents.run(run, agent, input)")
        return await session.run.effect(tool_name, call, arguments, check=check,
                                        idempotent=idempotent, retry=retry, timeout=timeout)

    # The schema the model sees is the function's, without the operation.
    body.__signature__ = shown  # type: ignore[attr-defined]
    body.__annotations__ = {k: v for k, v in hints.items() if k != params[0].name}
    body.__name__, body.__doc__, body.__module__ = fn.__name__, fn.__doc__, fn.__module__
    base = function_tool(body, name_override=tool_name, **tool_options)
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(FunctionTool) if f.init}
    return EffectTool(**fields)


def _caller(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn(op, **arguments)` as an effect function of `(op, arguments)`, sync or
    async as `fn` is (stead runs a sync one in a thread)."""
    if inspect.iscoroutinefunction(fn):
        async def call_async(op: stead.Operation, arguments: dict[str, Any]) -> Any:
            return await fn(op, **arguments)
        return call_async

    def call(op: stead.Operation, arguments: dict[str, Any]) -> Any:
        return fn(op, **arguments)
    return call


def journaled(tool: FunctionTool, session: Session) -> FunctionTool:
    invoke: Callable[[ToolContext[Any], str], Awaitable[Any]] = tool.on_invoke_tool
    name = tool.name
    effect = isinstance(tool, EffectTool)

    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> Any:
        async def live(_arguments: str) -> Any:  # the arguments enter the step's digest
            return await invoke(ctx, arguments)

        with session.scope.at("t:" + safe_key(ctx.tool_call_id)):
            if effect:  # its body journals the effect itself, under this address
                token = _SESSION.set(session)
                try:
                    return await invoke(ctx, arguments)
                finally:
                    _SESSION.reset(token)
            return await session.run.step(name, live, arguments)

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)
