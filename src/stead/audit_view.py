"""A run's operator audit, for `stead runs show`: every action an operator
took or was refused on the run (the dashboard's, a script's through
`stead.operator`), oldest first, with who, why and what became of it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from stead import timeline
from stead.records import ActionRow


def audit_json(rows: Sequence[ActionRow]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(r) for r in sorted(rows, key=lambda r: r.at)]


def render(rows: Sequence[ActionRow]) -> str:
    """The audit as lines ("" when there is none)."""
    if not rows:
        return ""
    lines = [f"operator actions ({len(rows)})"]
    for r in sorted(rows, key=lambda r: r.at):
        on = f" {r.target}" if r.target else ""
        lines += [f"  {timeline.clock_time(r.at)}  {r.action}{on}  by {r.author}  {r.outcome}",
                  f"    why     {timeline.shorten(r.why, 200)}",
                  f"    detail  {timeline.shorten(r.detail, 200)}"]
    return "\n".join(lines)
