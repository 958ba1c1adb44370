"""A run's conversation as `stead runs show RUN --conversation` prints it:
turn by turn, each model call with the messages it added to what earlier
calls sent, its parameters when they changed, and its answer. Anything
shaped like a wait token is masked, as everywhere a screen shows values."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stead.conversations import transcript
from stead.conversations.transcript import Call, Kept
from stead.workflow import waits


def mask(text: str) -> str:
    return waits.TOKEN_TEXT.sub("****", text)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                      default=str)


def _said(who: str, text: str) -> list[str]:
    lines = mask(text).split("\n")
    return [f"  {who}: {lines[0]}", *(f"  {' ' * len(who)}  {line}" for line in lines[1:])]


def _heading(c: Call) -> str:
    r = c.record
    given = c.answer.get("usage")
    usage = given if isinstance(given, dict) else {}
    tokens = f"tokens {usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out"
    if c.kept == Kept.NO:
        sent = "request not kept"
    elif c.kept == Kept.GONE:
        sent = "request no longer stored (forgotten, or imported without it)"
    else:
        sent = f"{c.sent} message(s) sent" + (f", {c.earlier} as before" if c.earlier else "")
    return f"── seq {r.seq} · {r.name} · {sent} · {tokens}"


def render(run_id: str, calls: Sequence[Call]) -> str:
    """The conversation, turn by turn."""
    if not calls:
        return f"run {run_id}: no model call answered"
    lines = [f"run {run_id}: {len(calls)} model call(s)"]
    params: Any = None
    for c in calls:
        lines.append(_heading(c))
        if c.params is not None and c.params != params:
            lines.append(f"  parameters: {mask(_compact(c.params))}")
            params = c.params
        for m in c.new:
            lines += _said(transcript.role(m), transcript.content(m))
        if c.text or not c.tool_calls:
            lines += _said("→ answer", c.text)
        for call in c.tool_calls:
            lines.append(f"  → calls {mask(str(call.get('name')))} "
                         f"{mask(_compact(call.get('arguments')))}")
    return "\n".join(lines)


def calls_json(calls: Sequence[Call]) -> list[dict[str, Any]]:
    """The conversation as `--json` prints it (tokens masked)."""
    out = []
    for c in calls:
        item = {"seq": c.record.seq, "name": c.record.name, "kept": str(c.kept),
                "sent": c.sent, "earlier": c.earlier, "new": list(c.new), "params": c.params,
                "answer": {"text": c.text, "tool_calls": c.tool_calls,
                           "usage": c.answer.get("usage")}}
        out.append(json.loads(mask(json.dumps(item, default=str))))
    return out
