"""What leaves a database and what comes in: pruning finished runs and
rejected events, exporting runs, and importing one exported elsewhere."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead.store import _large, _rejections
from stead.store.base.part import StorePart
from stead.store.seam import Flow, Writing
from stead.store.transactions import days as days_tx
from stead.store.transactions import retention as tx

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import ConversationPart, Record, RunExport, RunRow, StateRow, WaitRow


class Retention(StorePart):
    """The `Store`'s operations on what leaves a database and what comes in."""

    async def prunable(self, cutoff: float, limit: int,
                       run_ids: Sequence[str] | None = None) -> list[str]:
        """Up to `limit` finished runs last changed before `cutoff` that may be
        deleted (of `run_ids`, if given), oldest first (see `prune`)."""
        return await self.database.read(lambda: tx.prunable(cutoff, limit, run_ids))

    async def export_runs(self, run_ids: Sequence[str]) -> list[RunExport]:
        """Everything stored of each of `run_ids`."""
        return await self.database.read(lambda: tx.export_runs(run_ids))

    async def prune(self, cutoff: float, run_ids: Sequence[str]) -> list[str]:
        """Delete those of `run_ids` that still may be (finished before
        `cutoff`, not live, no live parent, no effect with an unknown
        outcome: checked again in this transaction), and everything stored
        of them, their large values' blobs included (those no other run
        owns). Returns the runs deleted."""
        large = self.large
        if large is None:
            return await self.database.write(lambda: tx.delete_runs(cutoff, run_ids), Writing())
        held = await self.database.read(lambda: _large.blobs_of(run_ids))
        deleted = await self.database.write(lambda: tx.delete_runs(cutoff, run_ids), Writing())
        if held:
            # After the commit: a crash before this leaves orphans `stead blobs gc` finds.
            owners = await self.database.read(lambda: _large.owned(held))
            await _large.delete_unowned(large, held, owners)
        return deleted

    async def add_days(self, now: float, ahead: int = 2, lock_timeout: float = 0.5) -> bool:
        """Make the journal's and the events' partitions of the day of `now`
        (UTC) and the `ahead` days after it, where missing (PostgreSQL; on
        SQLite nothing). False: another process is making them.
        `StoreUnavailable` at once if a lock was not had within `lock_timeout`
        seconds (a long transaction holds the journal): nothing was made,
        try later."""
        today = dt.datetime.fromtimestamp(now, dt.UTC).date()
        wanted = [today + dt.timedelta(days=i) for i in range(ahead + 1)]
        return await self.database.write(lambda: days_tx.add_days(wanted, lock_timeout),
                                         Writing())

    async def ended_days(self, cutoff: float) -> list[days_tx.Day]:
        """The days with partitions that ended before `cutoff`, oldest first."""
        return await self.database.read(lambda: days_tx.ended_days(cutoff))

    async def day_ids(self, day: days_tx.Day) -> list[str]:
        """The runs of `day`'s range."""
        return await self.database.read(lambda: days_tx.day_ids(day))

    async def prune_day(self, cutoff: float, day: days_tx.Day,
                        lock_timeout: float = 1.0) -> list[str] | None:
        """Delete the runs of `day` if every one may be pruned, emptying its
        partitions whole (see `transactions.days.empty_day`); the runs
        deleted, None if some run of the day is kept. `StoreUnavailable` at
        once if a lock was not had within `lock_timeout` seconds: nothing was
        deleted."""
        large = self.large

        def empty() -> Flow[list[str] | None]:
            return days_tx.empty_day(cutoff, day, lock_timeout)

        if large is None:
            return await self.database.write(empty, Writing())
        ids = await self.day_ids(day)
        held = await self.database.read(lambda: _large.blobs_of(ids))
        deleted = await self.database.write(empty, Writing())
        if held and deleted is not None:
            owners = await self.database.read(lambda: _large.owned(held))
            await _large.delete_unowned(large, held, owners)
        return deleted

    async def drop_day(self, day: days_tx.Day, lock_timeout: float = 1.0) -> float | None:
        """Drop the emptied partitions of `day`: the seconds its transaction
        held the lock on journal and events, None if the day is not empty.
        `StoreUnavailable` at once if the lock was not had within
        `lock_timeout` seconds: nothing was dropped, try later."""
        t0 = time.monotonic()
        dropped = await self.database.write(lambda: days_tx.drop_day(day, lock_timeout),
                                            Writing())
        return time.monotonic() - t0 if dropped else None

    async def prune_rejected(self, cutoff: float, limit: int) -> int:
        """Delete up to `limit` rejected events received before `cutoff`, of
        any run (see `store._rejections`). Returns how many."""
        return await self.database.write(lambda: _rejections.prune(cutoff, limit), Writing())

    async def prunable_rejected(self, cutoff: float) -> int:
        """How many rejected events were received before `cutoff`."""
        return await self.database.read(lambda: _rejections.prunable(cutoff))

    async def rejected_dropped(self, run_id: str | None) -> int:
        """How many rejected events of `run_id` (None: to runs that do not
        exist) were no longer kept: only the newest are (`store._rejections`)."""
        return await self.database.read(
            lambda: _rejections.dropped(_rejections.UNKNOWN if run_id is None else run_id))

    async def import_run(self, run: RunRow, journal: Sequence[Record],
                         waits: Sequence[WaitRow], state: StateRow | None = None,
                         conversation: Sequence[ConversationPart] = ()) -> RunRow:
        """Store a run exported from another database, with its journal,
        waits, task state (kept only if the task has none here) and the
        parts of its model calls' conversation. `InvalidInput` if its id, or
        a live run of its task, exists."""
        where = self.database.display
        return await self.database.write(
            lambda: tx.import_run(run, journal, waits, state, where, conversation),
            Writing(landed=lambda _: tx.imported(run)),
        )
