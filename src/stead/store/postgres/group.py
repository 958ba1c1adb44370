"""Group commit for fenced journal writes on PostgreSQL.

Appends and finishes go out on a connection of the store's own (no pool
checkout) as ONE autocommit statement (`fenced_write`, or
for a lone write `append_one`, `finish_one`, in queries.sql): the fence, the
inserts and the commit in one round trip. A write made while none is in
flight goes out at once from its caller's task; writes that arrive while one
is in flight wait for it, then go out together, in one statement: with many
runs in flight, one commit carries the steps of many. Each keeps its own
fence: a stale one inserts nothing and fails alone with `StaleLease` while
the others commit.

When a group fails otherwise, each of its writes is made again on its own
through `Connector.write`, so each gets its own outcome: a unique violation
fails only the write that caused it, and after a lost connection (outcome
unknown) each write first reads back whether it landed, then is retried
with backoff like any other write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import psycopg
from psycopg import pq

from stead import errors
from stead.store.futures import settle
from stead.store.postgres import journal
from stead.store.postgres.connection import (
    Conn,
    Connector,
    Verify,
    refused,
    replanned,
    retryable,
    translate,
)
from stead.store.seam import FencedWrite, stale

log = logging.getLogger("stead.store.postgres")


@dataclasses.dataclass(eq=False)
class _Job:
    write: FencedWrite
    verify: Verify[None]
    future: asyncio.Future[None]


class GroupCommit:
    def __init__(self, db: Connector) -> None:
        self._db = db
        self._conn: Conn | None = None
        self._queue: list[_Job] = []
        self._busy = False  # a write is in flight: new ones queue
        self._task: asyncio.Task[None] | None = None  # sending the queued ones
        self._closed = False

    async def write(self, write: FencedWrite, verify: Verify[None]) -> None:
        """Commit `write` (with whatever else is waiting); `verify` reads back
        whether it landed when a commit's outcome is unknown."""
        if self._closed:
            raise errors.StoreError("store is closed")
        job = _Job(write, verify, asyncio.get_running_loop().create_future())
        if self._busy:
            self._queue.append(job)
            await job.future
            return
        # Nobody is writing: write now, in the caller's task (no hand-off to
        # another task). Writes that arrive meanwhile queue up; a task of the
        # store's own sends them together once this one is done.
        self._busy = True
        try:
            await self._commit([job])
        finally:
            if self._queue:
                # Not a branch of the caller's workflow: store calls run outside
                # branches (see Store).
                self._task = asyncio.create_task(self._drain(), name="stead-group-commit")
            else:
                self._busy = False
        job.future.result()

    async def close(self) -> None:
        """Let the writes in flight finish, then close the connection."""
        self._closed = True
        while self._busy:
            if self._task is not None:
                await asyncio.wait([self._task])
            else:  # a caller's own write
                await asyncio.sleep(0.005)
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = [job for job in self._queue if not job.future.done()]
                self._queue = []
                if batch:
                    await self._commit(batch)
        except BaseException:  # cancelled (the loop is closing): so are the waiters
            for job in self._queue:
                job.future.cancel()
            self._queue = []
            raise
        finally:
            self._busy = False
            self._task = None

    async def _commit(self, batch: list[_Job]) -> None:
        # Runs are locked in run_id order, by every group of every process.
        batch.sort(key=lambda job: job.write.fence.run_id)
        sent = False
        try:
            conn = self._conn
            if conn is None or conn.closed:
                self._conn = None
                conn = self._conn = await self._db.connect()
            name, params = journal.fenced_query([job.write for job in batch])
            sent = True
            cur = await conn.execute(journal.Q[name], params, prepare=True)
            held = {int(row["n"]) for row in await cur.fetchall()}
        except BaseException as exc:
            await self._check_connection(exc)
            if not isinstance(exc, Exception):  # cancelled: the outcome stays unknown
                for job in batch:
                    job.future.cancel()
                raise
            await self._one_by_one(batch, exc, sent)
            return
        if held:
            self._db.commits += 1
        for n, job in enumerate(batch, 1):
            settle(job.future, None if n in held else stale(job.write.fence))

    async def _check_connection(self, exc: BaseException) -> None:
        """Keep the writer connection only if it is healthy and idle, and
        what it prepared still fits (see `connection.replanned`)."""
        conn = self._conn
        if conn is None:
            return
        stale = isinstance(exc, psycopg.Error) and replanned(exc)
        if stale or conn.closed or conn.info.transaction_status != pq.TransactionStatus.IDLE:
            self._conn = None
            try:
                await conn.close()
            except psycopg.Error as exc:
                log.debug("closing a broken writer connection: %s", exc)

    async def _one_by_one(self, batch: list[_Job], exc: Exception, sent: bool) -> None:
        """The group failed: make each write on its own, each with its own outcome."""
        if isinstance(exc, psycopg.Error) and retryable(exc):
            # Lost connection: the statement may have committed, unless the
            # server said it rolled back or it was never sent.
            unknown = sent and not refused(exc)
            log.warning("PostgreSQL at %s: %s; making %d write(s) one by one%s",
                        self._db.target.display, exc, len(batch),
                        ", reading back first" if unknown else "")
        elif len(batch) == 1:  # alone, its error is its own
            settle(batch[0].future,
                    translate(exc, self._db.target.display) if isinstance(exc, psycopg.Error)
                    else exc)
            return
        else:
            unknown = False
        await asyncio.gather(*(self._alone(job, unknown) for job in batch))

    async def _alone(self, job: _Job, unknown: bool) -> None:
        async def op(conn: Conn) -> None:
            await journal.write_fenced(conn, job.write)

        try:
            await self._db.write(op, verify=job.verify, unknown=unknown)
        except Exception as exc:
            settle(job.future, exc)
        else:
            settle(job.future, None)
