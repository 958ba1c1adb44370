"""Group commit for journal writes on SQLite.

Every append (or finish: an append that then ends the run's attempt) waits
for its own durable commit, but writes that arrive while the store thread is
busy share the next transaction: with many runs in flight, one fsync carries
several runs' steps. Each write keeps its own fence: a stale writer's write
is found out before it changes anything (its first INSERT carries the fence)
and fails alone with `StaleLease`; a write that fails past its fence (a
duplicate record) sends the batch round again with each write under a
savepoint, so it fails alone too. A run writing alone commits on the event
loop itself: there is nobody to share the commit with.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
import threading

from stead import errors
from stead.store.futures import Settled, settle_all
from stead.store.seam import FencedWrite
from stead.store.sqlite import journal
from stead.store.sqlite.connection import Connector


@dataclasses.dataclass(frozen=True, slots=True)
class _Job:
    """A write waiting for a group commit, and the future its caller awaits."""

    write: FencedWrite
    future: asyncio.Future[None]
    loop: asyncio.AbstractEventLoop


class GroupCommit:
    def __init__(self, db: Connector) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._queue: list[_Job] = []
        self._scheduled = False

    async def write(self, write: FencedWrite) -> None:
        db = self._db
        if not self._scheduled and db.alone(write.fence.run_id):
            done = db.try_inline(lambda conn: self._commit_alone(conn, write))
            if done is None:
                return
        loop = asyncio.get_running_loop()
        job = _Job(write, loop.create_future(), loop)
        with self._lock:
            self._queue.append(job)
            start = not self._scheduled
            self._scheduled = True
        if start:
            db.submit(self._flush)
        await job.future

    def _flush(self) -> None:
        """On the store thread: commit everything queued so far, together."""
        with self._lock:
            batch, self._queue = self._queue, []
            self._scheduled = False
        try:
            outcomes = self._db.on_writer(lambda conn: self._commit(conn, batch))
        except errors.SteadError as failed:  # closed, or failed as a whole
            outcomes = [failed] * len(batch)
        # One wake-up per event loop for the whole batch: each costs a write to
        # the loop's self-pipe (a syscall, ~40 µs on a small VM).
        answers: dict[asyncio.AbstractEventLoop, list[Settled]] = {}
        for job, exc in zip(batch, outcomes, strict=True):
            answers.setdefault(job.loop, []).append((job.future, exc))
        for loop, settled in answers.items():
            # A closed loop has nobody waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle_all, settled)

    def _commit_alone(self, conn: sqlite3.Connection, write: FencedWrite) -> None:
        with self._db.transaction(conn):
            journal.write_fenced(conn, write)

    def _commit(self, conn: sqlite3.Connection, batch: list[_Job]) -> list[BaseException | None]:
        if len(batch) == 1:  # alone: no savepoint needed
            self._commit_alone(conn, batch[0].write)
            return [None]
        try:
            return self._together(conn, batch, isolate=False)
        except (errors.SteadError, sqlite3.Error):
            # A write failed past its fence (a duplicate record, say) and took
            # the transaction with it: again, each under a savepoint.
            return self._together(conn, batch, isolate=True)

    def _together(self, conn: sqlite3.Connection, batch: list[_Job],
                  isolate: bool) -> list[BaseException | None]:
        write = self._one if isolate else self._unguarded
        with self._db.transaction(conn):
            return [write(conn, job.write) for job in batch]

    def _unguarded(self, conn: sqlite3.Connection, write: FencedWrite) -> BaseException | None:
        """A write with no savepoint. A stale fence is found before the write
        changes anything (the first INSERT carries the fence), so that write can
        fail alone; any other failure raises, undoing the whole transaction."""
        try:
            journal.write_fenced(conn, write)
        except errors.StaleLease as exc:
            return exc
        return None

    def _one(self, conn: sqlite3.Connection, write: FencedWrite) -> BaseException | None:
        conn.execute("SAVEPOINT one_write")
        try:
            journal.write_fenced(conn, write)
        except (errors.StaleLease, sqlite3.IntegrityError) as exc:
            conn.execute("ROLLBACK TO one_write")
            conn.execute("RELEASE one_write")
            return exc if isinstance(exc, errors.SteadError) else self._db.translate(exc)
        conn.execute("RELEASE one_write")
        return None
