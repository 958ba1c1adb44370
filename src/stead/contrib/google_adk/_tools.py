"""A tool call, journaled: the plugin's `before_tool_callback` runs the tool
itself (`tool.run_async`) inside a `run.step` addressed by its function-call
id, or, for a tool declared in `effects=`, a write-ahead `run.effect`, and
answers with the recorded response, so ADK skips its own run of the tool and
a resumed run never runs it again. What the tool did to its context's actions
(state changes, a transfer to another agent, skipping the summary) is
recorded with the response and put back on replay.

A tool named in `approvals=`, or an ADK tool built with
`require_confirmation`, first waits for a person's decision as a stead wait
of kind `"approval"`, bound to the tool, the call id and the arguments'
digest: the run holds no worker while it waits, and the decision is taken
once. An approved ADK confirmation tool then runs with its confirmation set;
a refusal is the call's error response, told to the model."""

from __future__ import annotations

from typing import Any

from google.adk.events.event_actions import EventActions
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.adk.tools.tool_context import ToolContext

import stead
from stead import errors
from stead.contrib._scope import json_digest, safe_key
from stead.contrib.google_adk import _session
from stead.contrib.google_adk._session import Session

KIND = "approval"
SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}},
          "required": ["approved"]}


def _response(value: Any) -> dict[str, Any]:
    """A tool's return as ADK sends it to the model: a dict as it is, anything
    else under `"result"`."""
    return value if isinstance(value, dict) else {"result": value}


def checked(value: Any, name: str) -> dict[str, Any]:
    """What an effect's check (`Outcome.done(value)`) or a person reconciling
    it says the tool returned, journaled as the tool's own return is."""
    try:
        json_digest(value)
    except (TypeError, ValueError):
        raise errors.InvalidCheckResult(
            f"the check of ADK tool {name!r} answered Outcome.done with a "
            f"{type(value).__name__}: a tool's check answers with what the tool returns (a "
            "dict, or a JSON value ADK sends as {\"result\": value})") from None
    return {"response": _response(value), "actions": {}}


def _restore(context: ToolContext, actions: dict[str, Any]) -> None:
    recorded = EventActions.model_validate(actions)
    for field in recorded.model_fields_set:
        setattr(context.actions, field, getattr(recorded, field))


async def _confirms(tool: BaseTool, args: dict[str, Any], context: ToolContext) -> bool:
    """Whether ADK asks a person before this call (`require_confirmation`)."""
    if not isinstance(tool, FunctionTool):
        return False
    return bool(await tool.check_require_confirmation(args, context))


async def _decide(session: Session, tool: BaseTool, call_id: str, args: dict[str, Any]
                  ) -> tuple[bool, str | None]:
    run = session.run
    request = {"tool": tool.name, "call_id": call_id, "arguments": args}
    bind = {"tool": tool.name, "call_id": call_id, "arguments_sha256": json_digest(args)}
    w: stead.Wait[Any] = await run.wait(KIND, bind=bind, expires_in=session.approval_expires_in,
                                        schema=SCHEMA, token=session.on_approval is not None,
                                        request=request)
    if session.on_approval is not None:
        await run.effect(f"ask approval {tool.name}", session.on_approval, w, request,
                         idempotent=True)
    try:
        event = await w
    except (stead.WaitExpired, stead.WaitRevoked) as exc:
        return False, f"no decision on this call arrived: {exc}"
    return bool(event["approved"]), event.get("reason") or None


async def answer(session: Session, tool: BaseTool, args: dict[str, Any],
                 context: ToolContext) -> dict[str, Any]:
    name = tool.name
    call_id = context.function_call_id
    if not call_id:
        raise errors.SteadError(f"ADK tool {name!r} was called without a function-call id")
    with session.scope.at("t:" + safe_key(call_id)):
        if name in session.approvals or await _confirms(tool, args, context):
            approved, reason = await _decide(session, tool, call_id, args)
            if not approved:
                return {"error": "a person refused this call" + (f": {reason}" if reason
                                                                 else "")}
            context.tool_confirmation = ToolConfirmation(confirmed=True)

        async def live(_args: dict[str, Any]) -> dict[str, Any]:
            with _session.bound(None):
                value = await tool.run_async(args=args, tool_context=context)
            return {"response": _response(value),
                    "actions": context.actions.model_dump(mode="json", exclude_none=True,
                                                          exclude_defaults=True, by_alias=True)}

        effect = session.effects.get(name)
        if effect is None:
            data = await session.run.step(name, live, args)
        else:
            async def send(op: stead.Operation, arguments: dict[str, Any]) -> dict[str, Any]:
                token = _session.OPERATION.set(op)
                try:
                    return await live(arguments)
                finally:
                    _session.OPERATION.reset(token)

            data = await effect.send(session.run, name, send, args,
                                     outcome=lambda done: checked(done, name))
    _restore(context, data["actions"])
    response: dict[str, Any] = data["response"]
    return response if response else {"result": None}  # an empty dict would run the tool
