"""What a search of the runs asks for: `RunSearch`, the criteria the runs
list filters by (status, code, task, queue, time range, text) and the keyset
cursor of the page it continues from.

A page after `Cursor(at, run_id)` holds the runs strictly older than that
run in (created_at, run_id) order, so a page reads only its own rows however
deep it is, and a run created meanwhile never shifts a later page.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from stead import run_ids
from stead.records import RunStatus

# Any time of a dated run id, as a LIKE pattern: the characters between its
# prefix and the random part a screen shows.
TIME = "_" * run_ids.TIME_DIGITS


def like_escaped(text: str) -> str:
    """`text` with LIKE's wildcards and its escape character escaped."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@dataclasses.dataclass(frozen=True)
class Cursor:
    """The last run of a page: the next page starts after it."""

    at: float
    run_id: str


@dataclasses.dataclass(frozen=True)
class RunSearch:
    """Each criterion given narrows the runs; `since` and `until` bound the
    creation time (epoch seconds, `until` excluded); `text` matches the start
    of a run id or a piece of a task id or workflow name."""

    status: RunStatus | None = None
    workflow: str | None = None
    version: int | None = None
    task_id: str | None = None
    queue: str | None = None
    tenant: str | None = None
    since: float | None = None
    until: float | None = None
    text: str | None = None
    after: Cursor | None = None
    limit: int = 100

    def params(self) -> dict[str, Any]:
        """The named parameters of the `search_runs` query."""
        text = None if not self.text else like_escaped(self.text)
        return {
            "status": self.status, "workflow": self.workflow, "version": self.version,
            "task_id": self.task_id, "queue": self.queue, "tenant": self.tenant,
            "since": self.since,
            "until": self.until,
            "prefix": None if text is None else f"{text}%",
            # What a screen shows of a dated run id (`run_ids.short`) finds it too.
            "shown": None if text is None else f"{run_ids.PREFIX}{TIME}{text}%",
            "pattern": None if text is None else f"%{text}%",
            "before_at": None if self.after is None else self.after.at,
            "before_id": None if self.after is None else self.after.run_id,
            "limit": self.limit,
        }
