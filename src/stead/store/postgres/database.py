"""The PostgreSQL database, for workers on many machines sharing one database.

`postgresql://user@host:5432/db?schema=NAME` (schema optional, default
`public`; two apps in two schemas of one database never see each other's
runs). psycopg 3 with a connection pool; every state change is one
transaction with the same semantics as on SQLite:

- claims are one `UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED)`, so
  concurrent claimers never wait on, nor share, a run;
- a fenced write locks its run row (`FOR NO KEY UPDATE`) while it checks the
  epoch, so no claim or cancel can slip in between the check and the commit;
  everything that touches a run's waits locks the run row first, and
  compare-and-set on task state takes an advisory lock per task key;
- journal appends and finishes are one statement each (fence, inserts and
  commit in one round trip), and concurrent ones share it (`group`);
- a write that makes a run claimable sends `NOTIFY stead_work` in its
  transaction; idle workers `LISTEN` and wake in milliseconds (`wait_for_work`),
  with polling as the fallback.

Connection faults and unacknowledged commits are handled in `connection`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from psycopg import pq

from stead.clock import Clock
from stead.records import Presence, RunRow
from stead.store import _rows, local_work, schema_versions, seam, sql_files
from stead.store._sealing import Sealed
from stead.store.postgres import connection, journal, migrate
from stead.store.postgres.connection import Conn
from stead.store.postgres.group import GroupCommit
from stead.store.postgres.listener import Listener
from stead.store.postgres.presence import PresenceLock

if TYPE_CHECKING:
    from psycopg import AsyncConnection, AsyncCursor
    from psycopg.rows import DictRow

T = TypeVar("T")
Q = sql_files.queries("postgres")


class PostgresDatabase(seam.Database):
    def __init__(self, url: str, *, clock: Clock, lease_clock: Clock | None = None,
                 retry_for: float = 30.0,
                 migrating: schema_versions.Migrating | None = None,
                 direct_url: str | None = None) -> None:
        self.url = url
        self.clock = clock
        self.lease_clock = lease_clock
        self.migrating = migrating or schema_versions.Migrating(
            on_open=schema_versions.on_open("postgres"))
        self.target = connection.parse_url(url)
        self.display = self.target.display
        # What needs a server session goes here when `url` is a transaction
        # pooler's (see postgres/pooler.py); its own schema= is not read.
        direct_url = direct_url or os.environ.get(connection.DIRECT_URL_ENV) or None
        direct = None if direct_url is None else connection.parse_url(direct_url)
        self._db = connection.Connector(self.target, retry_for=retry_for, direct=direct)
        self._listener = Listener(self._db)
        self._group = GroupCommit(self._db)
        self._presence: dict[str, PresenceLock] = {}  # by worker id
        self.local = self._local = local_work.signal(f"postgres:{self.display}#{self.schema}")

    @property
    def commits(self) -> int:
        return self._db.commits

    @property
    def schema(self) -> str:
        return self.target.schema

    async def open(self) -> None:
        await self._db.open(self.migrate)

    async def migrate(self, conn: Conn) -> None:
        """Pass the schema's version gate on `conn`: apply the migrations
        `self.migrating` allows, without stopping a live fleet (see
        `postgres/migrate.py`), or raise `SchemaBehind` / `SchemaAhead`. Many
        processes may open at once."""
        self.versions = await migrate.migrate(conn, self.schema, self.migrating,
                                            self.display, self.clock.now())

    async def close(self) -> None:
        for lock in self._presence.values():
            await lock.close()
        await self._group.close()
        await self._listener.close()
        await self._db.close()

    # -- flows ----------------------------------------------------------------
    async def read(self, flow: seam.FlowFactory[T]) -> T:
        flow = Sealed.flow(self, flow, writes=False)
        return await self._db.read(lambda conn: _run(conn, flow))

    async def write(self, flow: seam.FlowFactory[T], how: seam.Writing[T]) -> T:
        landed = how.landed

        async def verify(conn: Conn, attempted: T | None) -> T | seam.NotLanded:
            assert landed is not None
            return await _run(conn, lambda: landed(attempted))

        wakes: list[bool] = []
        watched = seam.noting_wakes(Sealed.flow(self, flow, writes=True), wakes)
        result = await self._db.write(
            lambda conn: _run(conn, watched), verify=None if landed is None else verify,
            autocommit=how.one_statement, pipelined=how.pipelined,
        )
        if wakes:
            self._local.notify()
        return result

    async def journal(self, write: seam.FencedWrite, landed: seam.Landed[None]) -> None:
        write = await Sealed.journal(self, write)

        async def verify(conn: Conn, attempted: None) -> seam.NotLanded | None:
            return await _run(conn, lambda: landed(attempted))

        await self._group.write(write, verify)

    # -- claiming and waking ------------------------------------------------------
    async def claim(self, claim: seam.Claim) -> list[RunRow]:
        params = _claim_params(claim)

        async def op(conn: Conn) -> list[RunRow]:
            params.update(now=self.clock.now(), lease_now=self.lease_now())
            cur = await conn.execute(Q["claim"], params)
            return [_rows.run(r) for r in await cur.fetchall()]

        async def verify(conn: Conn, attempted: list[RunRow] | None) -> list[RunRow]:
            # None leased means it did not land: claiming nothing is a fine answer.
            return await _claimed_by(conn, params)

        return await self._db.write(op, verify=verify, autocommit=True)

    async def claim_unshared(self, claim: seam.Claim) -> seam.UnsharedClaim:
        params = _claim_params(claim)
        params["most"] = seam.UNSHARED_TENANTS

        async def op(conn: Conn) -> seam.UnsharedClaim:
            params.update(now=self.clock.now(), lease_now=self.lease_now())
            cur = await conn.execute(Q["claim_unshared"], params)
            found = await cur.fetchall()
            return seam.UnsharedClaim(
                [str(t) for t in found[0]["ready_tenants"]],
                [_rows.run(r) for r in found if r["run_id"] is not None])

        async def verify(conn: Conn, attempted: seam.UnsharedClaim | None
                         ) -> seam.UnsharedClaim:
            # The tenants are read again: the claim's own answer is lost with its commit.
            taken = await _claimed_by(conn, params)
            cur = await conn.execute(Q["ready_tenants"], params)
            return seam.UnsharedClaim([str(r["tenant"]) for r in await cur.fetchall()], taken)

        return await self._db.write(op, verify=verify, autocommit=True)

    async def wait_for_work(self, timeout: float, *,
                            ring: Callable[[], None] | None = None,
                            since: seam.WorkMark | None = None) -> None:
        """Return when a run may have become claimable (NOTIFY), or after
        `timeout`; `ring` is called as NOTIFY comes. No mark is needed
        (`since`): a NOTIFY heard between two waits stays set for the next."""
        del since
        await self._listener.wait(timeout, ring)

    async def keep_presence(self, worker_id: str) -> Presence:
        lock = self._presence.get(worker_id)
        if lock is None:
            lock = self._presence[worker_id] = PresenceLock(self._db, worker_id)
        return await lock.keep()


def _claim_params(claim: seam.Claim) -> dict[str, Any]:
    """A claim's parameters but its times (`now`, `lease_now`), set at each try."""
    return {"worker_id": claim.worker_id, "hosted": list(claim.hosted),
            "exclude": list(claim.exclude), "limit": claim.limit,
            "lease_seconds": claim.lease_seconds}


async def _claimed_by(conn: Conn, params: dict[str, Any]) -> list[RunRow]:
    """The read-back of a claim whose commit went unacknowledged: the runs
    leased by that very claim (its time, `now`, is its own)."""
    cur = await conn.execute(Q["claimed_by"], params)
    return [_rows.run(r) for r in await cur.fetchall()]


async def _run(conn: Conn, flow: seam.FlowFactory[T]) -> T:
    """Drive a flow to its end on `conn`, in whatever transaction is open."""
    steps, answer = flow(), None
    try:
        while True:
            answer = await _do(conn, steps.send(answer))
    except StopIteration as done:
        return cast(T, done.value)


async def _do(conn: Conn, step: seam.Step) -> Any:
    if isinstance(step, seam.Journal):
        return await journal.apply(conn, step)
    if isinstance(step, seam.OffLoop):
        return await asyncio.to_thread(step.fn)
    if isinstance(step, seam.Together):
        return await _together(conn, step.queries)
    return await _answer(step, await _send(conn, step))


async def _send(conn: Conn, query: seam.Query) -> AsyncCursor[DictRow] | None:
    sql = Q[query.name]  # empty: nothing to do in this dialect
    # A statement with no parameter has one plan for every run: prepared at
    # once, it is planned once per connection, where psycopg's first five
    # runs of it would plan it five times (each over every day's partition
    # of the journal or the events it reads: 50 ms with a year of days).
    return await conn.execute(sql, query.params, prepare=True if not query.params else None) \
        if sql else None


async def _answer(query: seam.Query, cur: AsyncCursor[DictRow] | None) -> Any:
    if cur is None or query.fetch is seam.Fetch.NOTHING:
        return None
    if query.fetch is seam.Fetch.COUNT:
        if _pipelined(cur.connection):
            # In a pipeline the count comes with the statement's answer: a
            # block of its own syncs what was sent so far.
            async with cur.connection.pipeline():
                pass
        return cur.rowcount
    return await (cur.fetchone() if query.fetch is seam.Fetch.ONE else cur.fetchall())


async def _together(conn: Conn, queries: tuple[seam.Query, ...]) -> list[Any]:
    """`queries` in one round trip: in psycopg's pipeline each is sent at
    once and the block's end waits for every answer (one sync)."""
    # A connection scoped to a schema behind a transaction pooler wraps each
    # statement in a transaction of its own, in several statements to a
    # query: not something a pipeline carries.
    if len(queries) < 2 or conn.scoped:
        return [await _answer(q, await _send(conn, q)) for q in queries]
    if _pipelined(conn):  # a pipelined write's: the first answer syncs them all
        sent = [await _send(conn, q) for q in queries]
    else:
        async with conn.pipeline():
            sent = [await _send(conn, q) for q in queries]
    return [await _answer(q, cur) for q, cur in zip(queries, sent, strict=True)]


def _pipelined(conn: AsyncConnection[Any]) -> bool:
    """Whether `conn` is in a pipeline (a pipelined write's, `Writing.pipelined`)."""
    return bool(conn.pgconn.pipeline_status != pq.PipelineStatus.OFF)
