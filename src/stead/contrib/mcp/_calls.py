"""One MCP tool call as a journaled call: a `run.step` holding the server's
result, or, for a side-effecting tool, a write-ahead `run.effect` whose
idempotency key travels to the server in the request's `_meta` (and, with
`key_argument=`, as an argument of the tool)."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import mcp
import pydantic
from mcp import types

import stead
from stead import codec, errors
from stead.contrib import _effect

# The `_meta` key a side-effecting call's idempotency key is sent under.
KEY_META = "stead/idempotency-key"


@dataclasses.dataclass(frozen=True)
class Effect(_effect.Effect):
    """How a side-effecting tool is called: the options of `run.effect`
    (`key=` a fixed idempotency key, else one stead makes per call), and the
    tool argument that takes the key, if the tool has one."""

    key_argument: str | None = None


def side_effecting(tool: types.Tool) -> Effect | None:
    """What a server declares of a tool: one marked destructive (or not read
    only) is an effect, resent after a crash only if it is also marked
    idempotent; LangGraph's and the SDKs' default reading of an unmarked tool
    is kept (a call, not an effect)."""
    hints = tool.annotations
    if hints is None:
        return None
    if hints.destructive_hint or hints.read_only_hint is False:
        return Effect(idempotent=bool(hints.idempotent_hint))
    return None


def result(raw: Any, name: str) -> dict[str, Any]:
    if not isinstance(raw, types.CallToolResult):
        raise errors.SteadError(
            f"MCP tool {name!r} answered with a {type(raw).__name__}, not a tool result: a "
            "journaled call takes the tool's result in one answer (no input rounds)")
    return raw.model_dump(mode="json", by_alias=True, exclude_none=True)


def checked(answer: Any, name: str) -> dict[str, Any]:
    """What a side-effecting tool's check says it returned
    (`Outcome.done(result)`), journaled as the server's own answer is; an
    answer of another shape raises `InvalidCheckResult`."""
    try:
        return result(types.CallToolResult.model_validate(answer), name)
    except pydantic.ValidationError as exc:
        raise errors.InvalidCheckResult(
            f"the check of MCP tool {name!r} answered Outcome.done with "
            f"{type(answer).__name__} ({codec.describe(exc)}): a tool's check answers with "
            "the tool's result as the server sends it, an mcp.types.CallToolResult "
            "(or its JSON: {\"content\": [{\"type\": \"text\", \"text\": ...}], "
            "\"structuredContent\": {...}, \"isError\": false}), not the JSON of the "
            "service behind the tool") from None


def revive(data: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult.model_validate(data)


async def call(run: stead.Run, session: mcp.ClientSession, server: str, name: str,
               arguments: dict[str, Any], effect: Effect | None,
               **options: Any) -> types.CallToolResult:
    label = f"mcp {server}.{name}"
    if effect is None:
        async def ask(_name: str, _arguments: dict[str, Any]) -> dict[str, Any]:
            return result(await session.call_tool(name, arguments, **options), name)

        return revive(await run.step(label, ask, name, arguments))

    async def send(op: stead.Operation, _name: str, _arguments: dict[str, Any]
                   ) -> dict[str, Any]:
        sent = dict(arguments)
        if effect.key_argument is not None:
            sent[effect.key_argument] = op.key
        # An open map (`extra_items=Any`) the type checker does not model.
        meta = cast(types.RequestParamsMeta, {KEY_META: op.key})
        return result(await session.call_tool(name, sent, meta=meta, **options), name)

    return revive(await effect.send(run, label, send, name, arguments,
                                    outcome=lambda done: checked(done, name)))
