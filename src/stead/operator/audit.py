"""The operator audit: every action an operator took or was refused on a run
(the dashboard's, a script's through `stead.operator.act`), kept with who,
why and what became of it, and read back for `stead runs show`."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from typing import Any

from stead.client import Client
from stead.operator.forms import Decision
from stead.records import ActionOutcome, ActionRow
from stead.views import runs_view, timeline


def audit_json(rows: Sequence[ActionRow]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(r) for r in sorted(rows, key=lambda r: r.at)]


def render(rows: Sequence[ActionRow]) -> str:
    """The audit as lines ("" when there is none)."""
    if not rows:
        return ""
    lines = [f"operator actions ({len(rows)})"]
    for r in sorted(rows, key=lambda r: r.at):
        on = f" {r.target}" if r.target else ""
        lines += [f"  {runs_view.clock_time(r.at)}  {r.action}{on}  by {r.author}  {r.outcome}",
                  f"    why     {timeline.shorten(r.why, 200)}",
                  f"    detail  {timeline.shorten(r.detail, 200)}"]
    return "\n".join(lines)


async def record(client: Client, name: str, d: Decision, outcome: ActionOutcome,
                 detail: str) -> ActionRow:
    row = ActionRow(action_id=uuid.uuid4().hex, run_id=d.run_id, action=name,
                    target=d.target, author=d.by, why=d.why, outcome=outcome,
                    detail=detail[:2000], at=client.store.clock.now())
    return await client.store.record_action(row)
