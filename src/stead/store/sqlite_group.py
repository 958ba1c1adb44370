"""Group commit for journal appends on SQLite.

Every append waits for its own durable commit, but appends that arrive while
the writer thread is busy share the next transaction: with many runs in
flight, one fsync carries several runs' steps, and their finishes (a finish
is an append that then updates the run's row). Each append keeps its own
fence: a stale writer's append is found out before it changes anything (its
first INSERT carries the fence) and fails alone with `StaleLease`; an append
that fails past its fence (a duplicate record) sends the batch round again
with each append under a savepoint, so it fails alone too. A run writing
alone commits on the event loop itself: there is nobody to share the commit
with.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from stead import errors
from stead.records import Fence, Record, ResumeRecord
from stead.store.futures import Settled, settle_all

if TYPE_CHECKING:
    from stead.store.sqlite_base import SQLiteBase

# What else a write does once its records are in (a run's finish updates its row).
Then = Callable[[sqlite3.Connection], None] | None
_Job = tuple[Fence, Sequence[Record], ResumeRecord | None, Then,
             "asyncio.Future[None]", asyncio.AbstractEventLoop]


class GroupCommit:
    def __init__(self, store: SQLiteBase) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._queue: list[_Job] = []
        self._scheduled = False

    async def append(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        then: Then = None,
    ) -> None:
        store = self._store
        if not self._scheduled and store._alone(fence.run_id):
            done = store._try_inline(
                lambda conn: self._commit_alone(conn, fence, records, resume, then))
            if done is None:
                return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._queue.append((fence, records, resume, then, fut, loop))
            start = not self._scheduled
            self._scheduled = True
        if start:
            loop.run_in_executor(self._store._thread, self._flush)
        await fut

    def _flush(self) -> None:
        """On the writer thread: commit everything queued so far, together."""
        with self._lock:
            batch, self._queue = self._queue, []
            self._scheduled = False
        outcomes = self._commit(batch)
        # One wake-up per event loop for the whole batch: each costs a write to
        # the loop's self-pipe (a syscall, ~40 µs on a small VM).
        answers: dict[asyncio.AbstractEventLoop, list[Settled]] = {}
        for (_f, _r, _s, _t, fut, loop), exc in zip(batch, outcomes, strict=True):
            answers.setdefault(loop, []).append((fut, exc))
        for loop, settled in answers.items():
            # A closed loop has nobody waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle_all, settled)

    def _apply(self, conn: sqlite3.Connection, fence: Fence, records: Sequence[Record],
               resume: ResumeRecord | None, then: Then) -> None:
        """One write's statements, inside a transaction someone else holds."""
        self._store._fenced_insert(conn, fence, records, resume)
        if then is not None:
            then(conn)

    def _commit_alone(self, conn: sqlite3.Connection, fence: Fence, records: Sequence[Record],
                      resume: ResumeRecord | None, then: Then) -> None:
        with self._store._write(conn):
            self._apply(conn, fence, records, resume, then)

    def _commit(self, batch: list[_Job]) -> list[BaseException | None]:
        store = self._store
        with store._conn_lock:
            conn = store._conn
            if conn is None:
                return [errors.StoreError("store is closed")] * len(batch)
            try:
                if len(batch) == 1:  # alone: no savepoint needed
                    fence, records, resume, then, _fut, _loop = batch[0]
                    self._commit_alone(conn, fence, records, resume, then)
                    return [None]
                try:
                    return self._together(conn, batch, isolate=False)
                except (errors.SteadError, sqlite3.Error):
                    # A write failed past its fence (a duplicate record, say) and
                    # took the transaction with it: again, each under a savepoint.
                    return self._together(conn, batch, isolate=True)
            except errors.SteadError as exc:
                return [exc] * len(batch)
            except sqlite3.Error as exc:
                return [store._translate(exc)] * len(batch)

    def _together(self, conn: sqlite3.Connection, batch: list[_Job],
                  isolate: bool) -> list[BaseException | None]:
        write = self._one if isolate else self._unguarded
        with self._store._write(conn):
            return [write(conn, fence, records, resume, then)
                    for fence, records, resume, then, _fut, _loop in batch]

    def _unguarded(self, conn: sqlite3.Connection, fence: Fence, records: Sequence[Record],
                   resume: ResumeRecord | None, then: Then) -> BaseException | None:
        """A write with no savepoint. A stale fence is found before the write
        changes anything (the first INSERT carries the fence), so that write can
        fail alone; any other failure raises, undoing the whole transaction."""
        try:
            self._apply(conn, fence, records, resume, then)
        except errors.StaleLease as exc:
            return exc
        return None

    def _one(self, conn: sqlite3.Connection, fence: Fence, records: Sequence[Record],
             resume: ResumeRecord | None, then: Then) -> BaseException | None:
        conn.execute("SAVEPOINT one_append")
        try:
            self._apply(conn, fence, records, resume, then)
        except (errors.StaleLease, sqlite3.IntegrityError) as exc:
            conn.execute("ROLLBACK TO one_append")
            conn.execute("RELEASE one_append")
            return exc if isinstance(exc, errors.SteadError) else self._store._translate(exc)
        conn.execute("RELEASE one_append")
        return None
