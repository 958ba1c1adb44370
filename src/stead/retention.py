"""Retention: delete finished runs older than a cutoff, in bounded batches,
optionally exporting each run (as one JSON line) before it is deleted.

What may be deleted is decided in the store's query (`prunable_runs`), and
decided again inside the transaction that deletes: a finished run (completed,
failed, cancelled, revalidation_failed) last changed before the cutoff, whose
parent, if any, has ended too, and with no effect whose outcome is unknown.
A live run, or one stopped for a person, is never touched.

On PostgreSQL the journal and the events are partitioned by the day a run
started (`postgres/sql/0041_day_partitions.sql`): a day that ended before
the cutoff and whose runs may all be deleted goes first and whole (its
partitions emptied with the runs, then dropped under a moment's lock);
the rest (a day with a run still kept, runs of the old id shape, SQLite)
is deleted run by run.

Rejected events received before the cutoff are deleted too, of any run,
live or not, and of runs that do not exist (see `stead.store._rejections`):
they decide nothing later, and anyone could have sent them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from collections.abc import Callable
from typing import IO

from stead import bounds, errors
from stead.records import RunExport
from stead.store.base import Store

# Runs deleted per transaction.
BATCH = 500
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_age(text: str) -> float:
    """`30d`, `12h`, `90m`, `45s`, `2w` as seconds; `InvalidInput` otherwise."""
    found = _DURATION.match(text)
    if found is None or float(found.group(1)) <= 0:
        raise errors.InvalidInput(
            f"{text!r} is not an age: give a number and a unit, e.g. 30d, 12h, 90m, 45s, 2w")
    return bounds.seconds(float(found.group(1)) * _UNITS[found.group(2)], f"the age {text!r}")


async def _inlined(store: Store, found: RunExport) -> RunExport:
    run, journal = await store.inlined(found.run, found.journal)
    return dataclasses.replace(found, run=run, journal=journal)


async def _exported(store: Store, ids: list[str]) -> list[RunExport]:
    runs = await store.export_runs(ids)
    if store.large is not None:  # the blobs go with the runs: the export keeps values
        runs = [await _inlined(store, r) for r in runs]
    return runs


@dataclasses.dataclass(frozen=True)
class PruneReport:
    """What a prune did: `matched` runs could be deleted (with `dry_run`, all
    of them, counted without deleting), `deleted` were, in `batches`
    transactions; `exported` were written out first. `rejected` rejected
    events received before the cutoff were deleted on their own (with
    `dry_run`: would be)."""

    cutoff: float
    matched: int
    deleted: int
    batches: int
    exported: int
    dry_run: bool
    rejected: int = 0
    # Days whose partitions were dropped whole, and the longest any drop's
    # transaction took (seconds, its wait for the lock included).
    days: int = 0
    longest_drop: float = 0.0


def json_lines(out: IO[str]) -> Callable[[list[RunExport]], None]:
    """An exporter writing each run as one JSON line to `out`, flushed and
    (for a file) synced before its batch is deleted."""
    def write(batch: list[RunExport]) -> None:
        for run in batch:
            out.write(json.dumps(run.to_json(), separators=(",", ":")) + "\n")
        out.flush()
        # Not a file (a pipe, a buffer): flushed is all there is.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.fsync(out.fileno())

    return write


async def prune(
    store: Store, older_than: float, *, batch: int = BATCH, dry_run: bool = False,
    export: Callable[[list[RunExport]], None] | None = None, now: float | None = None,
) -> PruneReport:
    """Delete the finished runs last changed more than `older_than` seconds
    before `now` (default: the store's clock now), `batch` per transaction,
    handing each batch to `export` first."""
    if older_than <= 0 or batch < 1:
        raise errors.InvalidInput("older_than is seconds > 0, batch a count >= 1")
    cutoff = (store.clock.now() if now is None else now) - older_than
    if dry_run:
        found = await store.prunable(cutoff, 2**62)
        return PruneReport(cutoff, len(found), 0, 0, 0, True,
                           await store.prunable_rejected(cutoff))
    with contextlib.suppress(errors.StoreUnavailable):  # a chore: the workers make them too
        await store.add_days(store.clock.now())
    matched = deleted = batches = exported = days = 0
    longest = 0.0
    # Runs written out for a day that then kept one of its runs (it changed
    # meanwhile): not again below.
    written: set[str] = set()
    for day in await store.ended_days(cutoff):
        if export is not None:
            ids = await store.day_ids(day)
            if len(await store.prunable(cutoff, len(ids) or 1, ids)) != len(ids):
                continue  # a run of that day is kept: its prunable runs go one by one below
            for at in range(0, len(ids), batch):
                export(await _exported(store, ids[at:at + batch]))
            written.update(ids)
        try:
            gone = await store.prune_day(cutoff, day)
        except errors.StoreUnavailable:
            # A long transaction reads the journal (its lock was not had in
            # time): it holds the other days as well, and each would wait as
            # long. Their runs go one by one below; the days, at the next prune.
            break
        if gone is None:
            continue  # a run of that day is kept: its prunable runs go one by one below
        matched += len(gone)
        deleted += len(gone)
        exported += len(gone) if export is not None else 0
        batches += 1
        try:
            took = await store.drop_day(day)
        except errors.StoreUnavailable:
            break  # kept empty, dropped next time; the same holds the days after it
        if took is not None:
            days += 1
            longest = max(longest, took)
    while True:
        ids = await store.prunable(cutoff, batch)
        if not ids:
            break
        matched += len(ids)
        if export is not None:
            runs = await _exported(store, [i for i in ids if i not in written])
            export(runs)
            exported += len(runs) + sum(i in written for i in ids)
        gone = await store.prune(cutoff, ids)
        deleted += len(gone)
        batches += 1
        if len(ids) < batch or not gone:
            break
    rejected = 0
    while True:
        gone_events = await store.prune_rejected(cutoff, batch)
        rejected += gone_events
        if gone_events < batch:
            break
    return PruneReport(cutoff, matched, deleted, batches, exported, False, rejected, days,
                       longest)
