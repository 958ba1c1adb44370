"""PostgreSQL behind a connection pooler (PgBouncer and the like).

In **transaction** pooling a client connection has a server session only for
the length of one transaction: the next may run on another backend, which
another client used meanwhile. So on such a connection stead keeps nothing
in the session:

- no prepared statements (`prepare_threshold=None`, and `prepare=False`
  where the journal's writes would prepare theirs);
- the schema is set for each transaction (`SET LOCAL search_path`), never
  for the session; a statement sent outside a transaction runs in one of
  its own (`BEGIN; SET LOCAL ...`, the statement, `COMMIT`): two round trips
  more, paid only behind a transaction pooler;
- what needs a session (LISTEN, the presence lock, a migration's session
  lock) goes to the direct URL (`STEAD_PG_DIRECT_URL`) when one is given;
  without one, a worker polls for work instead of listening, holds no
  presence lock (its death is then judged by its leases running out, on the
  database's clock, or by its process on the claimer's own machine), and a
  migration that needs a session refuses, naming the direct URL.

Direct connections keep preparing: measured on the shared 2-core dev box
(load 7, one run of 400 trivial steps, four alternations, medians) the step
path took 2.95 ms a step as is, 3.09 with `prepare_threshold=none` and 2.08
with `pooler=transaction` on a direct URL: within the noise of that box, so
the choice costs nothing either way there; preparing is kept where it is safe.

Session pooling keeps a session per client connection: nothing changes.

Which pooling is in front is told by `pooler=transaction|session|none` in
the URL, else found out when the store opens (`detect`).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow

log = logging.getLogger("stead.store.postgres")
_IDLE = TransactionStatus.IDLE
_MIXED = re.compile(r"received \d+ results from command")
_ROUNDS = 5
_PIDS = b"SELECT pg_backend_pid() AS pid, inet_server_port() AS port"


class Pooling(enum.StrEnum):
    """What stands between stead and the server, as the URL says or `detect` found."""

    NONE = "none"  # the server itself, or a pooler that keeps a session per client
    SESSION = "session"  # a pooler in session mode: the same as none for stead
    TRANSACTION = "transaction"  # a pooler in transaction mode: no session state


class ScopedConn(psycopg.AsyncConnection[DictRow]):
    """A connection that, once `scope` names a schema, keeps no session
    state: every transaction sets the schema for itself, and a statement sent
    outside a transaction gets one of its own. Unscoped, it is a plain
    connection (the server's, or a session pooler's)."""

    _begin: sql.Composed | None = None
    _local: sql.Composed | None = None

    def scope(self, schema: str) -> None:
        self.prepare_threshold = None  # nothing this connection prepares outlives a transaction
        self._local = sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema))
        self._begin = sql.SQL("BEGIN; ") + self._local

    @property
    def scoped(self) -> bool:
        return self._begin is not None

    async def execute(
        self,
        query: Any,
        params: Any = None,
        *,
        prepare: bool | None = None,
        binary: bool = False,
    ) -> psycopg.AsyncCursor[DictRow]:
        if self._begin is None:
            return await super().execute(query, params, prepare=prepare, binary=binary)
        if self.info.transaction_status != _IDLE:
            return await super().execute(query, params, prepare=False, binary=binary)
        await super().execute(self._begin, prepare=False)
        try:
            cur = await super().execute(query, params, prepare=False, binary=binary)
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                if not self.closed:
                    await super().execute(b"ROLLBACK", prepare=False)
            raise
        await super().execute(b"COMMIT", prepare=False)
        return cur

    @contextlib.asynccontextmanager
    async def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False,
    ) -> AsyncIterator[psycopg.AsyncTransaction]:
        outer = self.info.transaction_status == _IDLE
        try:
            async with super().transaction(savepoint_name, force_rollback) as tx:
                if outer and self._local is not None:
                    await super().execute(self._local, prepare=False)
                yield tx
        except psycopg.InternalError as exc:
            if not _MIXED.search(str(exc)):
                raise
            # A pooler whose server connection died answers BEGIN or COMMIT
            # with its error and the command's result: the connection is
            # lost (so is a COMMIT's outcome), not broken in a new way.
            await self.close()
            raise psycopg.OperationalError(f"connection lost through a pooler: {exc}") from exc


async def detect(conn: ScopedConn, connect: Callable[[], Awaitable[ScopedConn]]) -> Pooling:
    """Whether `conn` goes through a transaction pooler, told with `other`, a
    second connection to the same URL (`connect`).

    A server session keeps its backend: in session pooling (or none) a
    connection's backend pid never changes, and no other connection is given
    it while this one lives. Through a transaction pooler the backend of
    `conn`'s finished statement is free for the next transaction of any
    client: `other` opens a transaction (PgBouncer hands out the backend
    freed last) and `conn` asks again. A shared pid, or a changed one, is
    transaction pooling; the check costs a connection and three round trips
    (up to five times, while it shows nothing, on a busy pooler), made only
    when the server's port differs from the one connected to (a proxy or
    pooler is in front)."""
    # Never prepared: psycopg prepares a statement on the server from its
    # fifth run, and through a transaction pooler the next run of that name
    # can reach another backend ("prepared statement does not exist"): a
    # busy pooler takes this many rounds.
    row = await (await conn.execute(_PIDS, prepare=False)).fetchone()
    assert row is not None
    if row["port"] is None or int(row["port"]) == int(conn.info.port):
        return Pooling.NONE
    other = await connect()
    try:
        # Another client may take the freed backend first (a busy pooler):
        # a round that shows nothing is tried again, a few times.
        for _ in range(_ROUNDS):
            mine = (await (await conn.execute(_PIDS, prepare=False)).fetchone() or {}).get("pid")
            async with other.transaction():
                theirs = (await (await other.execute(_PIDS, prepare=False)).fetchone()
                          or {}).get("pid")
                again = (await (await conn.execute(_PIDS, prepare=False)).fetchone()
                         or {}).get("pid")
            if theirs == mine or again != mine:
                return Pooling.TRANSACTION
    finally:
        await other.close()
    return Pooling.SESSION
