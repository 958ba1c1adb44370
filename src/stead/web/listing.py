"""The runs list's query string: its filters (status, workflow@version, task
id, queue, time range, text), its page size and its keyset cursor, read from
the URL and written back into the links, so a filtered page can be
bookmarked and every page link keeps the filters.

Everything here comes from outside: each value is bounded, and a value that
is not what its field takes (an unknown status, a version that is no whole
number, a time that is no time, a cursor not made here) is refused with
`InvalidInput`, which the page answers with 400.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import unicodedata
import urllib.parse
from collections.abc import Mapping

from stead import errors, tenants
from stead.records import RunStatus
from stead.searches import Cursor
from stead.web import window

PAGE = 50
MOST = 500  # the largest page a URL may ask for
TEXT = 200  # the longest filter value
# Creation times are epoch seconds: this bounds a cursor's to year 5138.
LATEST = 1e11
FIELDS = ("status", "workflow", "task_id", "queue", "tenant", "since", "until", "q")


@dataclasses.dataclass(frozen=True)
class RunsQuery:
    """The runs list as the URL asks for it; `values` are the filters as
    typed (to fill the form and the links back in)."""

    values: dict[str, str]
    status: RunStatus | None
    workflow: str | None
    version: int | None
    task_id: str | None
    queue: str | None
    tenant: str | None
    since: float | None
    until: float | None
    text: str | None
    after: Cursor | None
    limit: int

    def link(self, after: Cursor | None = None) -> str:
        """This list's URL (its filters kept), from the page after `after`."""
        params = {k: v for k, v in self.values.items() if v}
        if self.limit != PAGE:
            params["limit"] = str(self.limit)
        if after is not None:
            params["after"] = cursor_text(after)
        return "/runs" + ("?" + urllib.parse.urlencode(params) if params else "")


def cursor_text(c: Cursor) -> str:
    # repr() of a float reads back as the same float: the page boundary is exact.
    return f"{c.at!r}~{c.run_id}"


def _cursor(text: str) -> Cursor:
    at, sep, run_id = text.partition("~")
    try:
        when = float(at)
    except ValueError:
        when = math.nan
    if not sep or not run_id or not math.isfinite(when) or not 0 <= when <= LATEST:
        raise errors.InvalidInput(
            "after is not a page cursor of this list; open /runs and follow its Next link")
    return Cursor(when, run_id)


def _time(name: str, text: str) -> float:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise errors.InvalidInput(
            f"{name} must be a time like 2026-12-01T09:30 (UTC), not {text[:40]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def parse(query: Mapping[str, str]) -> RunsQuery:
    """The runs list `query` asks for; `InvalidInput` if a value is not one
    its field takes."""
    values = {k: " ".join(query.get(k, "").split()) for k in FIELDS}
    too_long = [k for k, v in values.items() if len(v) > TEXT]
    if too_long:
        raise errors.InvalidInput(f"{too_long[0]} is longer than {TEXT} characters")
    # PostgreSQL refuses NUL in text, and no name an operator types holds a
    # control character (format characters, bidi ones too, are searched for).
    if any(unicodedata.category(c) == "Cc" for v in (*values.values(), query.get("after", ""))
           for c in v):
        raise errors.InvalidInput("a filter holds a control character; type it again")
    status = values["status"] or None
    if status is not None and status not in RunStatus.__members__.values():
        raise errors.InvalidInput(f"unknown status {status!r}; one of: {', '.join(RunStatus)}")
    name, at, version = values["workflow"].partition("@")
    return RunsQuery(
        values=values,
        status=None if status is None else RunStatus(status),
        workflow=name or None,
        version=window.whole("the version after @", version, 1, 10**9) if at else None,
        task_id=values["task_id"] or None,
        queue=values["queue"] or None,
        tenant=tenants.check(values["tenant"] or None, "tenant"),
        since=_time("since", values["since"]) if values["since"] else None,
        until=_time("until", values["until"]) if values["until"] else None,
        text=values["q"] or None,
        after=_cursor(query["after"][:TEXT + 40]) if query.get("after") else None,
        limit=window.whole("limit", query["limit"], 1, MOST) if query.get("limit") else PAGE,
    )
