"""Runs as text from their rows alone: the table `stead runs ls` prints, a
stranded run's line, a run as JSON, and the times every view of a run is
written in.

`stead runs ls` draws only this, so it builds none of the records of a
journal or a takeover that `timeline` names. Pure functions over what
`Client` returns; no I/O here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stead.client import RunInfo


def clock_time(t: float) -> str:
    """An absolute time, in UTC, to the second. A stored time no date can
    show (one written before numbers were checked at the door) is said in
    words, never a traceback."""
    try:
        return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return "not a time" if t != t else ("beyond year 9999" if t > 0 else "before year 1")


def offset(seconds: float) -> str:
    """A time offset from the run's start: `+0.012s`, `+4m05s`, `+2h03m`, `+3d04h`."""
    s = max(seconds, 0.0)
    if s < 60:
        return f"+{s:.3f}s"
    if not s < 1e12:  # past year 30000, or infinite, or NaN: no count of days says more
        return "+forever"
    whole = int(s)
    if whole < 3600:
        return f"+{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"+{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"+{whole // 86400}d{whole % 86400 // 3600:02d}h"


def ago(seconds: float) -> str:
    """A duration in a few characters: `4.2s`, `3m05s`, `2h03m`."""
    return offset(seconds)[1:]


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    """`rows` under `header` in columns as wide as their widest cell, the
    columns numbered in `right` aligned right."""
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        out = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    return [line(header), *(line(r) for r in rows)]


def render_runs(infos: Sequence[RunInfo]) -> str:
    """The table `stead runs ls` prints."""
    if not infos:
        return "no runs"
    header = ["run", "workflow", "status", "task", "created", "updated"]
    rows = [
        [i.run_id, f"{i.workflow}@{i.version}", i.status, i.task_id or "-",
         clock_time(i.created_at), offset(i.updated_at - i.created_at)]
        for i in infos
    ]
    if any(i.tenant is not None for i in infos):  # a tenant column only where one is named
        header.insert(3, "tenant")
        for row, i in zip(rows, infos, strict=True):
            row.insert(3, i.tenant or "-")
    return "\n".join(table(header, rows, right=set()))


def stranded_reason(info: RunInfo) -> str:
    """`no worker hosts refund_order@1 since …`."""
    since = ("and none has yet" if info.hosted_at is None
             else f"since {clock_time(info.hosted_at)}")
    return f"no worker hosts {info.workflow}@{info.version} {since}"


def stranded_line(info: RunInfo) -> str:
    """`run R (refund_order@1, pending): no worker hosts refund_order@1 since …`."""
    return f"run {info.run_id} ({info.workflow}@{info.version}, {info.status}): " + \
        stranded_reason(info)


def run_json(info: RunInfo) -> dict[str, Any]:
    """A run as `--json` prints it."""
    data = dataclasses.asdict(info)
    data.pop("created", None)
    return data
