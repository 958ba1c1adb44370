"""A crew's tool calls, journaled: each call is a `run.step` holding the
tool's result (or, for a tool made by `effect_tool`, a write-ahead
`run.effect`), addressed by the tool, the digest of its arguments and how
many such calls came before, so a resumed crew gets each result back and the
tool does not run again. An effect tool made with `approval=True` first
waits for a person (a stead wait of kind `"approval"` bound to the tool and
its arguments); a refusal is told to the agent."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pydantic
from crewai.tools import BaseTool

import stead
from stead import errors
from stead.contrib._effect import Effect
from stead.contrib._scope import json_digest
from stead.contrib.crewai._session import Session, journaling

KIND = "approval"
SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}},
          "required": ["approved"]}


class EffectTool(BaseTool):
    """A CrewAI tool whose call is a stead effect (see `effect_tool`)."""

    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    fn: Any = None
    options: Any = None
    key_of: Any = None
    approval: bool = False

    def _run(self, **arguments: Any) -> Any:
        raise errors.SteadError(
            f"effect tool {self.name!r} acts only in a stead run: kick the crew off with "
            "stead.contrib.crewai.kickoff(run, crew)")

    async def sent(self, session: Session, key: str, arguments: dict[str, Any]) -> Any:
        run = session.run
        if self.approval:
            approved, reason = await _approved(session, self.name, key, arguments)
            if not approved:
                return f"A person refused this call of {self.name}: {reason or 'no reason'}"
        options: Effect = self.options
        if self.key_of is not None:
            options = dataclasses.replace(options, key=str(self.key_of(arguments)))
        return await options.send(run, self.name, _caller(self.fn), arguments)


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


def effect_tool(
    fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
    key: Callable[[dict[str, Any]], str] | None = None, check: Any = None,
    idempotent: bool = False, approval: bool = False, tool: str | None = None,
    retry: stead.Retry | None = None, timeout: float | None = None,
) -> EffectTool:
    """A CrewAI tool whose call is a stead effect: `fn(op, **arguments)` runs
    at most once, its intent journaled before it runs, `op.key` its
    idempotency key (`key(arguments)`, else one stead makes; the same on every
    attempt). After a crash an effect whose outcome is unknown is resent only
    if `idempotent`, else `check(op)` is asked, else the run stops for a person
    (`stead reconcile`). With `approval=True` each call first waits for a
    person's decision (`stead approve RUN --wait WAIT`). The agent sees the
    parameters after `op`, and `description` (else `fn`'s docstring)."""
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        raise TypeError(f"an effect tool's function takes the operation first: {fn!r}")
    fields: dict[str, Any] = {
        p.name: (p.annotation if p.annotation is not inspect.Parameter.empty else Any,
                 ... if p.default is inspect.Parameter.empty else p.default)
        for p in params[1:]}
    tool_name = name or fn.__name__
    schema = pydantic.create_model(f"{tool_name}_arguments", **fields)
    return EffectTool(
        name=tool_name, description=description or inspect.getdoc(fn) or tool_name,
        args_schema=schema, fn=fn, key_of=key, approval=approval,
        options=Effect(check=check, idempotent=idempotent, tool=tool, retry=retry,
                       timeout=timeout))


async def _approved(session: Session, name: str, key: str, arguments: dict[str, Any]
                    ) -> tuple[bool, str | None]:
    run, scope = session.run, session.scope
    request = {"tool": name, "arguments": arguments}
    bind = {"tool": name, "call": key, "arguments_sha256": json_digest(arguments)}
    with scope.at(key + "a"):
        w: stead.Wait[Any] = await run.wait(KIND, bind=bind, schema=SCHEMA, request=request,
                                            token=session.on_approval is not None,
                                            expires_in=session.approval_expires_in)
        if session.on_approval is not None:
            await run.effect(f"ask approval {name}", session.on_approval, w, request,
                             idempotent=True)
    try:
        event = await w
    except (stead.WaitExpired, stead.WaitRevoked) as exc:
        return False, f"no decision on this call arrived: {exc}"
    return bool(event["approved"]), event.get("reason") or None


async def _called(session: Session, tool: BaseTool, arguments: dict[str, Any]) -> Any:
    scope = session.scope
    key = "t:" + scope.next(f"{tool.name}:{json_digest(arguments)[:16]}")
    if isinstance(tool, EffectTool):
        with scope.at(key):
            return await tool.sent(session, key, arguments)
    with scope.at(key):
        return await session.run.step(f"tool {tool.name}", tool._run, **arguments)


def _journaled(tool: BaseTool) -> BaseTool:
    """A copy of `tool` whose calls are journaled in the current session."""
    copy = tool.model_copy()

    def run(**arguments: Any) -> Any:
        session = journaling()
        if session is None:
            return tool._run(**arguments)
        return session.blocking(_called(session, tool, arguments))

    object.__setattr__(copy, "_run", run)
    return copy


def journal(crew: Any) -> None:
    """Give the crew's agents and tasks journaled copies of their tools (the
    crew is stead's own copy of the user's: the user's tools stay as they are)."""
    holders = [*crew.agents, *crew.tasks]
    if crew.manager_agent is not None:
        holders.append(crew.manager_agent)
    for holder in holders:
        if holder.tools:
            holder.tools = [_journaled(t) if isinstance(t, BaseTool) else t
                            for t in holder.tools]
