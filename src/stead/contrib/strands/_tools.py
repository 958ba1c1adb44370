"""The agent's tool calls, journaled: an `ExecuteToolStage` middleware makes
each call a `run.step` (a tool declared in `effects=`, a write-ahead
`run.effect`) addressed by its tool-use id, so parallel calls replay whatever
order they finished in. A recorded result is handed back to the agent as the
tool's own `ToolResultEvent`, and the tool does not run again.

A tool named in `approvals=` first asks for a person's decision (a Strands
interrupt, which `run` turns into a stead wait); a refusal is the tool's
error result, told to the model. A tool that interrupts itself
(`tool_context.interrupt`) is journaled as interrupted: a replay raises the
same interrupt without running it, and once answered the call runs again
from its start, as Strands runs it."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

from strands.interrupt import Interrupt
from strands.middleware import ExecuteToolContext, MiddlewareNext, ToolResultEvent
from strands.types._events import ToolInterruptEvent  # only there, in the pinned release
from strands.types.events import TypedEvent
from strands.types.tools import ToolResult

import stead
from stead import errors
from stead.contrib._scope import safe_key
from stead.contrib.strands import _session
from stead.contrib.strands._relay import Finished, Relay

APPROVAL = "approval"  # the name of the interrupt a tool in `approvals=` raises


def approved(response: Any) -> tuple[bool, str | None]:
    """A person's decision (`{"approved": bool, "reason": ...}`, as `stead
    approve` and `stead reject` send it)."""
    if isinstance(response, dict):
        reason = response.get("reason")
        return bool(response.get("approved")), str(reason) if reason else None
    return False, "the decision was not an approval"


def refused(call_id: str, reason: str | None) -> ToolResultEvent:
    text = "a person refused this call" + (f": {reason}" if reason else "")
    return ToolResultEvent({"toolUseId": call_id, "status": "error", "content": [{"text": text}]})


def tool_result(call_id: str, value: Any, name: str) -> ToolResult:
    """What an effect's check (`Outcome.done(value)`) or a person reconciling
    it says the tool returned, as the tool's result: a `ToolResult` as it is,
    a text as its text, any other JSON value as JSON text (as Strands' `@tool`
    formats what a function returns)."""
    if isinstance(value, dict) and "status" in value and "content" in value:
        return {**value, "toolUseId": call_id}  # type: ignore[typeddict-item]
    if isinstance(value, str):
        return {"toolUseId": call_id, "status": "success", "content": [{"text": value}]}
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        raise errors.InvalidCheckResult(
            f"the check of Strands tool {name!r} answered Outcome.done with a "
            f"{type(value).__name__}: a tool's check answers with what the tool returns (a "
            "text or a JSON value) or with its ToolResult ({\"status\": \"success\", "
            "\"content\": [{\"text\": ...}]})") from None
    return {"toolUseId": call_id, "status": "success", "content": [{"text": text}]}


async def journaled(context: ExecuteToolContext,
                    next_fn: MiddlewareNext[ExecuteToolContext, TypedEvent]
                    ) -> AsyncGenerator[TypedEvent, None]:
    session = _session.CURRENT.get()
    if session is None:  # not in a stead run: the agent's own call
        async for event in next_fn(context):
            yield event
        return
    session.check()
    tool_use = context.tool_use
    name, call_id = tool_use["name"], tool_use["toolUseId"]
    if name in session.approvals:
        # Raises Strands' InterruptException until the agent is resumed with
        # this call's decision (`run` waits for it as a stead wait).
        decision = context.interrupt(APPROVAL, reason={"tool": name, "input": tool_use["input"]})
        ok, reason = approved(decision.response)
        if not ok:
            yield refused(call_id, reason)
            return
    relay = Relay()
    interrupted: list[list[Interrupt]] = []

    async def live(_input: Any) -> dict[str, Any]:
        result: ToolResultEvent | None = None
        with _session.bound(None):
            async for event in next_fn(context):
                if isinstance(event, ToolResultEvent):
                    result = event
                elif isinstance(event, ToolInterruptEvent):
                    interrupted.append(list(event.interrupts))
                    return {"interrupt": [i.to_dict() for i in event.interrupts]}
                else:
                    relay.put(event)
        if result is None:
            raise RuntimeError(f"tool {name!r} ended without a result")
        if isinstance(result.exception, stead.SteadError):
            # The tool said its outcome is unknown (OutcomeUncertain): stead,
            # not the model, decides what happens next.
            raise result.exception
        return {"result": dict(result.tool_result)}

    effect = session.effects.get(name)
    attempt = session.calls[call_id]
    session.calls[call_id] += 1
    with session.scope.at("t:" + safe_key(call_id) + (f"#{attempt}" if attempt else "")):
        if effect is None:
            task = relay.start(session.run.step(name, live, tool_use["input"]))
        else:
            async def send(op: stead.Operation, arguments: Any) -> dict[str, Any]:
                token = _session.OPERATION.set(op)
                try:
                    return await live(arguments)
                finally:
                    _session.OPERATION.reset(token)

            task = relay.start(effect.send(
                session.run, name, send, tool_use["input"],
                outcome=lambda done: {"result": tool_result(call_id, done, name)}))
    async for event in _session.guarded(session, relay.events(task)):
        if not isinstance(event, Finished):
            yield event
            continue
        data = event.value
        if "interrupt" in data:
            raised = interrupted[0] if interrupted else [Interrupt(**i) for i in data["interrupt"]]
            yield ToolInterruptEvent(tool_use, raised)
        else:
            yield ToolResultEvent(data["result"])
