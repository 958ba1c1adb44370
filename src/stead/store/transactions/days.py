"""The journal's and the events' day partitions (PostgreSQL, see
`postgres/sql/0041_day_partitions.sql`; on SQLite every query here is empty
and each flow finds nothing to do): made ahead of the runs that fill them,
and dropped whole once every run of the day may be pruned."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

from stead.store import schema_versions
from stead.store.seam import Flow, execute, one, rows
from stead.store.transactions import retention


@dataclasses.dataclass(frozen=True)
class Day:
    """One day's partitions: the run ids from `lo` to before `hi`."""

    day: dt.date
    lo: str
    hi: str


def add_days(days: Sequence[dt.date], lock_timeout: float) -> Flow[bool]:
    """Make the partitions of `days` that are missing, waiting at most
    `lock_timeout` seconds for each lock; False if another process is making
    them now (it makes the same)."""
    made = True
    timeout = schema_versions.lock_timeout_setting(lock_timeout)
    for day in days:
        row = yield one("add_day", {"day": day, "lock_timeout": timeout})
        made = made and (row is None or bool(row["made"]))
    return made


def ended_days(before: float) -> Flow[list[Day]]:
    """The days with partitions that ended before `before`, oldest first."""
    found = yield rows("partition_days", {"before": before})
    return [Day(r["day"], str(r["lo"]), str(r["hi"])) for r in found or ()]


def day_ids(day: Day) -> Flow[list[str]]:
    """The runs of `day`'s range."""
    found = yield rows("day_run_ids", {"lo": day.lo, "hi": day.hi})
    return [str(r["run_id"]) for r in found or ()]


def empty_day(cutoff: float, day: Day, lock_timeout: float) -> Flow[list[str] | None]:
    """If every run of `day` may be pruned (as `retention.delete_runs`
    judges), delete them, their journal and events by emptying the day's
    partitions, waiting at most `lock_timeout` seconds for each lock; the
    runs deleted. None: some run of the day is kept (its rows wait for the
    per-run prune, or a later day's)."""
    found = yield rows("day_runs", {"lo": day.lo, "hi": day.hi})
    ids = [str(r["run_id"]) for r in found or ()]
    keep = (yield from retention.prunable(cutoff, len(ids), ids)) if ids else []
    if len(keep) != len(ids):
        return None
    yield execute("empty_day", {
        "day": day.day, "lock_timeout": schema_versions.lock_timeout_setting(lock_timeout)})
    if ids:
        for query in retention.BESIDE_JOURNAL:
            yield execute(query, {"run_ids": ids})
    return ids


def drop_day(day: Day, lock_timeout: float) -> Flow[bool]:
    """Drop an emptied day's partitions, waiting at most `lock_timeout`
    seconds for the lock on journal and events; False if it is not empty."""
    row = yield one("drop_day", {
        "day": day.day, "lock_timeout": schema_versions.lock_timeout_setting(lock_timeout)})
    return row is None or bool(row["dropped"])
