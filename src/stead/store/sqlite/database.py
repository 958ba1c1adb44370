"""The embedded database: one SQLite file in WAL mode with synchronous commits
(but a claim's: see `Connector.transaction`).

Several worker processes on one machine share the file; SQLite serialises
writers (`BEGIN IMMEDIATE`), so every claim and fenced write is atomic, and
the database itself is the arbiter of every race. The blocking driver runs on
one thread per store object (see `connection.Connector`), so the event loop
never waits on disk; a run writing alone commits on the loop itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from stead import errors
from stead.clock import Clock
from stead.store import _rows, local_work, schema_versions, seam, sql_files
from stead.store._sealing import Sealed
from stead.store.sqlite import journal, migrate, wal_watch
from stead.store.sqlite.connection import (
    Connector,
    Mark,
    busy_timeout_from_url,
    path_from_url,
)
from stead.store.sqlite.group import GroupCommit

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import RunRow

T = TypeVar("T")
Q = sql_files.queries("sqlite")
# How often an idle worker looks whether anyone committed to the file.
_WATCH_INTERVAL = 0.01
# After a write to the -wal: how long to look closely for its commit to show
# (a commit's sync takes a fraction of a millisecond), then how often and how
# many times to look again.
_SETTLE_WITHIN = 0.002
_SOON_INTERVAL = 0.0005
_SOON_LOOKS = 10


class SQLiteDatabase(seam.Database):
    def __init__(self, url: str, *, clock: Clock, lease_clock: Clock | None = None,
                 busy_timeout: float = 10.0, existing: bool = False,
                 migrating: schema_versions.Migrating | None = None) -> None:
        self.url = self.display = url
        self.clock = clock
        self.lease_clock = lease_clock
        self.migrating = migrating or schema_versions.Migrating(
            on_open=schema_versions.on_open("sqlite"))
        self.path = path_from_url(url)
        self.busy_timeout = busy_timeout_from_url(url, busy_timeout)
        self._db = Connector(self.path, self.busy_timeout, existing=existing)
        self._group = GroupCommit(self._db)
        self._wal: wal_watch.WalWatch | None = None
        self._wal_tried = False
        self.local = self._local = local_work.signal(
            f"sqlite:{id(self)}" if self.path == ":memory:" else
            f"sqlite:{os.path.realpath(self.path)}")

    @property
    def commits(self) -> int:
        return self._db.commits

    async def open(self) -> None:
        await self._db.open(self._migrate)

    def _migrate(self, conn: sqlite3.Connection) -> bool:
        """Pass the schema's gate (see `schema_versions`); whether it committed."""
        self.versions = migrate.migrate(conn, self.migrating, self.display, self.clock.now())
        return bool(self.versions.applied)

    async def close(self) -> None:
        if self._wal is not None:
            self._wal.close()
            self._wal = None
        await self._db.close()

    # -- flows ----------------------------------------------------------------
    async def read(self, flow: seam.FlowFactory[T]) -> T:
        flow = Sealed.flow(self, flow, writes=False)
        return await self._db.call(lambda conn: _run(conn, flow))

    async def write(self, flow: seam.FlowFactory[T], how: seam.Writing[T]) -> T:
        # A local commit either returns or raises: `how.landed` is never needed.
        if how.releases is not None:
            self._db.done_writing(how.releases)

        wakes: list[bool] = []
        watched = seam.noting_wakes(Sealed.flow(self, flow, writes=True), wakes)

        def transact(conn: sqlite3.Connection) -> T:
            with self._db.transaction(conn, synced=how.synced):
                return _run(conn, watched)

        result = await self._db.call(transact, inline=not how.reads_files)
        if wakes:
            self._local.notify()
            wal_watch.poke(self.path)
        return result

    async def journal(self, write: seam.FencedWrite, landed: seam.Landed[None]) -> None:
        write = await Sealed.journal(self, write)
        try:
            await self._group.write(write)
        finally:
            if write.finish is not None:
                self._db.done_writing(write.fence.run_id)

    # -- claiming -------------------------------------------------------------
    async def claim(self, claim: seam.Claim) -> list[RunRow]:
        self._db.check_file()  # a worker claims at every poll: it notices a lost file
        return await self._db.call(lambda conn: self._claim(conn, claim))

    async def claim_unshared(self, claim: seam.Claim) -> seam.UnsharedClaim:
        self._db.check_file()

        def op(conn: sqlite3.Connection) -> seam.UnsharedClaim:
            # Two statements, not one: on the file, a statement costs no round trip.
            tenants = [str(r[0]) for r in conn.execute(
                Q["ready_tenants"], {"most": seam.UNSHARED_TENANTS})]
            return seam.UnsharedClaim(
                tenants, self._claim(conn, claim) if len(tenants) <= 1 else [])

        return await self._db.call(op)

    def _claim(self, conn: sqlite3.Connection, claim: seam.Claim) -> list[RunRow]:
        params = {"worker_id": claim.worker_id, "lease_seconds": claim.lease_seconds,
                  "lease_now": self.lease_now(), "now": self.clock.now(),
                  "hosted": json.dumps(list(claim.hosted)),
                  "exclude": json.dumps(list(claim.exclude)), "limit": claim.limit}
        # An idle worker's poll is a read: it takes the write lock (and costs a
        # commit) only when there is something to claim.
        if conn.execute(Q["claim_candidates"], params).fetchone() is None:
            return []
        with self._db.transaction(conn, synced=False):
            ids = [r[0] for r in conn.execute(Q["claim_candidates"], params)]
            taken = [_rows.run(r) for r in
                     conn.execute(Q["claim"], {**params, "run_ids": json.dumps(ids)})]
        return sorted(taken, key=lambda r: r.created_at)

    def holding(self, run_ids: Sequence[str]) -> None:
        """Runs just claimed count as writing from now on (see
        `Connector.alone`): a batch's first writes share the store thread's
        commits instead of each holding the event loop through its sync, while
        the worker has other runs to drive and claims to make."""
        self._db.writing(run_ids)

    def work_mark(self) -> seam.WorkMark | None:
        return self._db.mark()

    async def wait_for_work(self, timeout: float, *,
                            ring: Callable[[], None] | None = None,
                            since: seam.WorkMark | None = None) -> None:
        """Return soon after anyone (another process, this one) commits to the
        file, or after `timeout`. SQLite cannot notify, but `PRAGMA
        data_version` changes with every commit made on another connection and
        reading it touches no disk: a look every 10 ms costs microseconds, and
        the worker's claim query runs only when something changed (or at the
        poll, for timers that came due). Where the `-wal` can be watched
        (`wal_watch`), a write to it brings the next look forward to at once,
        and `ring` is called then if the commit shows.

        Changes count from `since` (a `work_mark` taken before the claim that
        found nothing) when this store has committed nothing since it: a run
        committed while that claim looked (after its read, before this wait)
        wakes the wait at once, not at the next commit or poll. That is
        likeliest at a checkpoint's cadence: the first writer after a
        checkpoint starts the `-wal` afresh, which readers see as a change
        before its commit shows, so the claim that change wakes looks while
        the commit is still being made. Counted from the wait's own start
        instead when this store committed meanwhile: its own commits (its
        runs' steps) are no news."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen = self._db.seen_at(since) if isinstance(since, Mark) else None
        if seen is None:
            seen = self._db.data_version()
        if seen is None:
            await asyncio.sleep(timeout)
            return
        if not self._wal_tried:
            self._wal_tried = True
            self._wal = wal_watch.open_watch(self.path)
        soon = 0  # looks left at the short interval

        def shows() -> bool:
            return self._db.data_version() != seen

        if shows():  # committed since the mark
            return
        while (left := deadline - loop.time()) > 0:
            pause = min(_SOON_INTERVAL if soon else _WATCH_INTERVAL, left)
            soon = max(0, soon - 1)
            if self._wal is None:
                await asyncio.sleep(pause)
            elif await self._wal.written(pause, ring, shows):
                # A commit that may make a run claimable says so once it shows
                # (`wal_watch.poke`): looked at once, it has.
                if shows():
                    return
                # A commit writes its frames to the -wal before it shows in
                # data_version: if it does not show yet, it will in a moment.
                # Looked for closely only after a quiet spell: while the file
                # is written on and on, the looks at the short interval do.
                if not soon and await self._wal.until(shows, _SETTLE_WITHIN, ring):
                    return
                soon = _SOON_LOOKS
            if shows():
                return


def _run(conn: sqlite3.Connection, flow: seam.FlowFactory[T]) -> T:
    """Drive a flow to its end on `conn`, in whatever transaction is open."""
    steps, answer = flow(), None
    try:
        while True:
            answer = _do(conn, steps.send(answer))
    except StopIteration as done:
        return cast(T, done.value)


def _do(conn: sqlite3.Connection, step: seam.Step) -> Any:
    if isinstance(step, seam.Journal):
        return journal.apply(conn, step)
    if isinstance(step, seam.OffLoop):
        return step.fn()
    if isinstance(step, seam.Together):
        return [_do(conn, q) for q in step.queries]
    sql = Q[step.name]  # empty: nothing to do in this dialect
    try:
        statements = _STATEMENTS.get(step.name)
        if statements is not None:  # several, in turn; their answer is nothing
            params = _params(step.params)
            for one in statements:
                conn.execute(one, params)
            return None
        cur = conn.execute(sql, _params(step.params)) if sql else None
    except (UnicodeEncodeError, OverflowError) as exc:  # a lone surrogate, an int past 2**63
        raise errors.StoreRejected(
            f"SQLite cannot take a value given to {step.name} ({exc}); trying again cannot "
            "succeed, nothing was written") from None
    if cur is None or step.fetch is seam.Fetch.NOTHING:
        return None
    if step.fetch is seam.Fetch.COUNT:
        return cur.rowcount
    return cur.fetchone() if step.fetch is seam.Fetch.ONE else cur.fetchall()


# The queries whose body is several statements with `-- then` between them,
# each run in turn with the query's parameters: where PostgreSQL makes one
# statement of them (a writable CTE), which SQLite has no form for.
_THEN = re.compile(r"^--\s*then\s*$", re.MULTILINE)
_STATEMENTS = {name: tuple(part.strip() for part in _THEN.split(sql))
               for name, sql in Q.items() if _THEN.search(sql)}


def _params(params: dict[str, Any]) -> dict[str, Any]:
    """Lists go as JSON text (the query reads them with `json_each`)."""
    if any(type(v) is list for v in params.values()):
        return {k: json.dumps(v) if type(v) is list else v for k, v in params.items()}
    return params
