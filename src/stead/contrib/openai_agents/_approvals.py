"""A tool call that `needs_approval`, decided through a stead wait.

The wait is bound to the call: the tool, its call id and the digest of its
arguments. An event carrying other values is rejected, the wait is consumed
once, and the approved call then runs as the journaled step of that call id:
a resumed run finds it in the journal and never runs it again."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from agents import ToolApprovalItem

import stead
from stead.contrib._scope import safe_key
from stead.contrib.openai_agents._session import Session

KIND = "approval"
SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}},
          "required": ["approved"]}
Ask = Callable[..., Any]


def _field(raw: Any, name: str) -> Any:
    return raw.get(name) if isinstance(raw, dict) else getattr(raw, name, None)


def _decoded(raw: Any) -> Any:
    """The call's arguments as the model wrote them, a JSON text, decoded; a
    text that is not JSON (a model may write anything) is handed as it is."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def request(item: ToolApprovalItem) -> dict[str, Any]:
    """What a person is asked to decide: the tool, the call and its arguments
    (decoded from the JSON text the model wrote)."""
    return {"tool": item.tool_name or _field(item.raw_item, "name"),
            "call_id": _field(item.raw_item, "call_id") or _field(item.raw_item, "id"),
            "arguments": _decoded(_field(item.raw_item, "arguments"))}


async def decide(session: Session, items: Sequence[ToolApprovalItem], ask: Ask | None,
                 expires_in: dt.timedelta | float | None) -> list[tuple[bool, str | None]]:
    """Open a wait for each pending call (and hand each to `ask`, an effect),
    then wait for each decision: `(approved, reason)`. A wait that expired or
    was revoked is a refusal."""
    run = session.run
    opened: list[stead.Wait[Any]] = []
    for item in items:
        asked = request(item)
        # Bound to the model's own text, so a wait's binding never depends on
        # how the decoded arguments are written out again.
        raw = _field(item.raw_item, "arguments")
        bind = {"tool": asked["tool"], "call_id": asked["call_id"],
                "arguments_sha256": hashlib.sha256(str(raw or "").encode()).hexdigest()}
        with session.scope.at("a:" + safe_key(str(asked["call_id"]))):
            w: stead.Wait[Any] = await run.wait(KIND, bind=bind, expires_in=expires_in,
                                                schema=SCHEMA, token=ask is not None)
            if ask is not None:
                await run.effect(f"ask approval {asked['tool']}", ask, w, asked,
                                 idempotent=True)
        opened.append(w)
    decisions: list[tuple[bool, str | None]] = []
    for w in opened:
        try:
            event = await w
        except (stead.WaitExpired, stead.WaitRevoked) as exc:
            # No decision is a refusal, told to the model, as pydantic-ai's RequestInput does.
            decisions.append((False, f"no decision on this call arrived: {exc}"))
            continue
        decisions.append((bool(event["approved"]), event.get("reason") or None))
    return decisions
