"""Connecting to PostgreSQL: the URL, a pool whose connections use the
store's schema, retries, and the one place where driver errors become
stead errors.

A transaction that fails because the connection dropped (a server restart,
`pg_terminate_backend`, a network blip) is tried again with backoff, for at
most `retry_for` seconds, then `StoreUnavailable`. Before COMMIT that is safe:
the server rolled the transaction back. If the connection drops *during*
COMMIT nobody knows whether it landed, so the write is resolved by reading
back (each write says how, see `Connector.write`), never by writing twice.

The SQL lives in `sql/queries.sql`, by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from stead import errors
from stead.store import seam, sql_files
from stead.store.postgres.pooler import Pooling, ScopedConn, detect
from stead.store.seam import NotLanded, still_held
from stead.store.urls import display_url

T = TypeVar("T")
_MISSING: Any = object()
Conn = ScopedConn
log = logging.getLogger("stead.store.postgres")
_Q = sql_files.queries("postgres")

# Query parameters stead reads itself; everything else goes to libpq.
_OURS = ("schema", "pool_size", "pooler", "prepare_threshold")
# The pool size when the URL gives none.
POOL_SIZE_ENV = "STEAD_PG_POOL_SIZE"
# Where to open what needs a server session when the URL goes through a
# transaction pooler (see `postgres/pooler.py`).
DIRECT_URL_ENV = "STEAD_PG_DIRECT_URL"
# The pooled URLs this process has said it found behind a transaction pooler.
_SAID: set[str] = set()
# How long a first statement may wait unanswered before stead says what it waits for.
_QUIET_FOR = 10.0
_SCHEMA = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# Errors that retrying cannot fix: bad password, no such database or role.
# (libpq gives connection failures no SQLSTATE, so they are told by message.)
_PERMANENT = ("28", "3D")
# What the server refuses for good, whatever the connection: bad data, broken constraints.
_REJECTED = ("22", "23")
# The functions of the day partitions (sql/0041_day_partitions.sql) that
# stead calls under a lock_timeout of its own.
_DAY_FUNCTIONS = ("stead_add_day(", "stead_empty_day(", "stead_drop_day(")
_REFUSED = ("does not exist", "authentication failed", "pg_hba.conf", "permission denied",
            "no password supplied")


@dataclasses.dataclass(frozen=True)
class Target:
    """What a `postgresql://` URL names."""

    conninfo: str  # for libpq: stead's own parameters removed
    schema: str
    pool_size: int
    display: str  # the URL without its password, for messages
    kwargs: dict[str, Any]
    pooling: Pooling | None = None  # None: find out on open (see `pooler.detect`)


def parse_url(url: str) -> Target:
    """`postgresql://user@host:5432/db?schema=NAME&pool_size=N`; other query
    parameters (sslmode, connect_timeout, application_name, host=a,b,
    target_session_attrs…) go to libpq. `pool_size` defaults to
    `STEAD_PG_POOL_SIZE`, else 10; `pooler=transaction|session|none` says
    what is in front of the server (else it is found out, see
    `postgres/pooler.py`); `prepare_threshold=N|none` is psycopg's (how many
    runs of a statement before it is prepared on the server; none: never)."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise errors.StoreError(f"not a postgresql URL: {display_url(url)!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in _OURS}
    rest = [(k, v) for k, v in query if k not in _OURS]
    display = display_url(urlunsplit((parts.scheme, parts.netloc, parts.path,
                                      urlencode(rest, quote_via=quote), "")))
    schema = ours.get("schema", "public")
    if not _SCHEMA.match(schema):
        raise errors.StoreError(
            f"postgresql URL {display!r}: schema {schema!r} is not a plain name; use "
            "letters, digits and _ (at most 63), starting with a letter or _"
        )
    if schema.lower() == "information_schema" or schema.lower().startswith("pg_"):
        raise errors.StoreError(
            f"postgresql URL {display!r}: schema {schema!r} is a PostgreSQL system schema; "
            "name a schema of stead's own, e.g. schema=stead"
        )
    text = ours.get("pool_size") or os.environ.get(POOL_SIZE_ENV) or "10"
    if not text.isdigit() or int(text) < 1:
        raise errors.StoreError(
            f"postgresql URL {display!r}: pool_size must be a whole number >= 1 (in the "
            f"URL, else {POOL_SIZE_ENV}), got {text!r}"
        )
    pooling = None
    if "pooler" in ours:
        try:
            pooling = Pooling(ours["pooler"])
        except ValueError:
            raise errors.StoreError(
                f"postgresql URL {display!r}: pooler is one of {', '.join(Pooling)}, "
                f"not {ours['pooler']!r}") from None
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path,
                           urlencode(rest, quote_via=quote),
                           parts.fragment))
    try:
        conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise errors.StoreError(f"postgresql URL {display!r}: {exc}") from exc
    kwargs: dict[str, Any] = {"autocommit": True, "row_factory": dict_row}
    given = {k for k, _ in rest}
    if "application_name" not in given:
        kwargs["application_name"] = "stead"
    if "connect_timeout" not in given:
        kwargs["connect_timeout"] = 10  # a host that does not answer must not hang a retry
    if "prepare_threshold" in ours:
        threshold = ours["prepare_threshold"].lower()
        if threshold not in ("none", "") and not threshold.isdigit():
            raise errors.StoreError(
                f"postgresql URL {display!r}: prepare_threshold is a whole number or none, "
                f"got {ours['prepare_threshold']!r}")
        kwargs["prepare_threshold"] = int(threshold) if threshold.isdigit() else None
    return Target(
        conninfo=conninfo, schema=schema, pool_size=int(text), display=display, kwargs=kwargs,
        pooling=pooling,
    )


# Reads back on a connection whether a write whose commit went unacknowledged
# landed: its result if so, else NOT_LANDED. Given what that attempt computed
# before its commit (None: not known).
Verify = Callable[[Conn, T | None], Awaitable[T | NotLanded]]


def _permanent(exc: psycopg.Error) -> bool:
    return (exc.sqlstate or "")[:2] in _PERMANENT or (
        exc.sqlstate is None and any(text in str(exc) for text in _REFUSED)
    )


def translate(exc: psycopg.Error, display: str) -> errors.StoreError:
    """A driver error that retrying does not fix, as a stead error."""
    if _permanent(exc):
        return errors.StoreUnavailable(
            f"PostgreSQL at {display} refused the connection ({exc}); check the user, "
            "password and database in the URL"
        )
    if waited_out(exc):
        return errors.StoreUnavailable(
            f"PostgreSQL at {display}: gave up waiting for a lock another transaction "
            f"holds ({exc}); nothing was changed, it is tried again later")
    if isinstance(exc, psycopg.OperationalError):
        return errors.StoreUnavailable(f"PostgreSQL at {display}: {exc}")
    if rejected(exc):
        return errors.StoreRejected(
            f"PostgreSQL at {display} refused it for good ({exc}); trying again cannot "
            "succeed, nothing was written")
    return errors.StoreError(f"database {display}: {exc}")


def rejected(exc: psycopg.Error) -> bool:
    """A data exception (class 22: an invalid byte sequence, a character
    with no equivalent, a NUL, a number out of range) or a broken integrity
    constraint (class 23), told by the server or by the driver before
    sending: the same write fails again, however often it is tried."""
    return not rerouted(exc) and (
        isinstance(exc, psycopg.DataError | psycopg.IntegrityError)
        or (exc.sqlstate or "")[:2] in _REJECTED)


def rerouted(exc: psycopg.Error) -> bool:
    """A row routed to a default partition (`journal_dated_other`,
    `events_dated_other`) while another session attached the day's partition
    its key belongs to (`stead_add_day`): once the attach commits, the server
    checks the row against the default partition's new bounds and refuses
    it. Nothing was written; the same statement, run again, is routed to the
    new partition. A check violation like any other, told by the relation."""
    return (isinstance(exc, pg_errors.CheckViolation)
            and (exc.diag.table_name or "").endswith("_dated_other")
            and "partition constraint" in str(exc))


def refused(exc: psycopg.Error) -> bool:
    """The server answered that it rolled the transaction back (a conflict:
    deadlock, serialization failure, a row rerouted): it did not commit,
    and the connection is sound."""
    return isinstance(exc, pg_errors.TransactionRollback) or rerouted(exc)


def retryable(exc: psycopg.Error) -> bool:
    """Lost connections, a server starting or shutting down, deadlocks and
    serialization failures, stale prepared statements, a row routed to a
    partition that changed under it: the transaction did not commit, try
    again. Not a wait for a lock that ran out (`waited_out`)."""
    return (isinstance(exc, psycopg.OperationalError) and not _permanent(exc)
            and not waited_out(exc)) or replanned(exc) or rerouted(exc)


def waited_out(exc: psycopg.Error) -> bool:
    """A day's partitions made, emptied or dropped gave up waiting for a lock
    after the `lock_timeout` stead set for it. The bound is there so that a
    lock stead queues for, behind someone's long transaction, does not hold
    every query queued behind it for long; trying again at once would queue
    again, so the caller hears it and tries at its next turn. Told by the
    function it was raised in: a lock timeout set on the role or database
    stays a wait like others, tried again."""
    return isinstance(exc, pg_errors.LockNotAvailable) and any(
        name in (exc.diag.context or "") for name in _DAY_FUNCTIONS)


def replanned(exc: psycopg.Error) -> bool:
    """A statement this connection prepared no longer fits its tables: a
    newer release's migration added a column to a table it reads with `*`
    while this process ran (a rolling deploy). The server refuses it without
    running it; the connection is dropped, with what it prepared, and the
    statement tried again on another."""
    return isinstance(exc, pg_errors.FeatureNotSupported) \
        and "cached plan must not change result type" in str(exc)


def backoff(attempt: int) -> float:
    return 0.0 if attempt == 0 else min(2.0, 0.05 * 2 ** (attempt - 1)) * random.uniform(0.5, 1)


async def _roll_back(conn: Conn) -> None:
    """End the transaction a failed pipelined write left open, if it did."""
    with contextlib.suppress(psycopg.Error):
        if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
            await conn.rollback()


class Connector:
    """A pool of autocommit connections on one schema, with retries.

    `direct`: where to open what needs a server session of its own (LISTEN,
    the presence lock, migrations) when the URL goes through a pooler (see
    `postgres/pooler.py`); not used when the URL reaches the server itself."""

    def __init__(self, target: Target, *, retry_for: float,
                 direct: Target | None = None) -> None:
        self.target = target
        self.direct = direct
        self.retry_for = retry_for
        self.commits = 0
        self.pooling = target.pooling
        self._pool: AsyncConnectionPool[Conn] | None = None

    @property
    def sessions(self) -> bool:
        """Whether a connection of one's own keeps its server session: false
        behind a transaction pooler with no direct URL."""
        return self.direct is not None or self.pooling is not Pooling.TRANSACTION

    async def _raw(self, target: Target) -> Conn:
        kwargs = target.kwargs
        if target is self.direct and "application_name" not in conninfo_to_dict(target.conninfo):
            # Named as the pooled connections are, so an operator (or a test)
            # finds all of a process's sessions by one name.
            named = conninfo_to_dict(self.target.conninfo).get("application_name")
            kwargs = {**kwargs, "application_name": named or kwargs.get("application_name")}
        return await Conn.connect(target.conninfo, **kwargs)

    async def _on_schema(self, conn: Conn, scoped: bool) -> Conn:
        try:
            if scoped:
                conn.scope(self.target.schema)
            else:
                await conn.execute(_Q["set_search_path"], {"schema": self.target.schema})
        except BaseException:
            await conn.close()
            raise
        return conn

    async def connect(self) -> Conn:
        """One connection outside the pool, on the schema (which may not exist yet)."""
        return await self._on_schema(await self._raw(self.target),
                                     self.pooling is Pooling.TRANSACTION)

    async def connect_session(self) -> Conn:
        """A connection that keeps its server session (the direct URL's, if
        given), on the schema: for LISTEN, the presence lock, migrations."""
        if self.direct is None:
            return await self.connect()
        return await self._on_schema(await self._raw(self.direct), False)

    async def open(self, migrate: Callable[[Conn], Awaitable[None]]) -> None:
        """Find out what is in front of the server, migrate on a connection of
        its own (so a refused connection says why), then open the pool."""
        async def once(fresh: bool) -> None:
            conn = await self._raw(self.target)
            try:
                with self._saying_what_it_waits_for("its first statement"):
                    if self.pooling is None:
                        self.pooling = await self._detect(conn)
                if self.pooling is Pooling.NONE:
                    self.direct = None  # the URL reaches the server itself: nothing to bypass
                if self.direct is not None:
                    await conn.close()
                    conn = await self._on_schema(await self._raw(self.direct), False)
                else:
                    conn = await self._on_schema(conn, self.pooling is Pooling.TRANSACTION)
                await migrate(conn)
            finally:
                await conn.close()

        await self._retry(once, "open the store")
        self.commits += 1
        scoped = self.pooling is Pooling.TRANSACTION
        kwargs = dict(self.target.kwargs)
        if scoped:
            kwargs["prepare_threshold"] = None  # a pooled backend is not this connection's

        async def configure(conn: Conn) -> None:
            await self._on_schema(conn, scoped)

        # reconnect_timeout: a pool that cannot connect gives up at once and grows
        # again on demand, instead of backing off for minutes after a restart
        # (the retries here bridge the outage on connections of their own).
        self._pool = AsyncConnectionPool(
            self.target.conninfo, connection_class=Conn, kwargs=kwargs,
            min_size=1, max_size=self.target.pool_size, configure=configure, open=False,
            name=f"stead:{self.target.schema}", reconnect_timeout=0,
        )
        try:
            await self._pool.open(wait=True, timeout=max(self.retry_for, 1.0))
        except psycopg.OperationalError as exc:
            behind = "" if self.pooling is Pooling.NONE else (
                "; the pooler in front of it answered none of them: its server connections "
                "may all be held (its query_wait_timeout ends such a wait)")
            raise errors.StoreUnavailable(
                f"PostgreSQL at {self.target.display} could not be reached "
                f"within {self.retry_for:g} s: {exc}{behind}"
            ) from exc

    async def _detect(self, conn: Conn) -> Pooling:
        async def other() -> Conn:
            return await self._raw(self.target)

        found = await detect(conn, other)
        if found is not Pooling.TRANSACTION or self.target.display in _SAID:
            return found
        _SAID.add(self.target.display)  # one line a process, however many stores it opens
        if self.direct is None:
            log.warning(
                "PostgreSQL at %s is behind a transaction pooler and no direct URL is given "
                "(%s): workers poll for work instead of listening, hold no presence lock "
                "(a dead worker's runs move when its leases run out), and a migration that "
                "needs a session refuses; say pooler=transaction in the URL to skip this check",
                self.target.display, DIRECT_URL_ENV)
        else:
            log.info("PostgreSQL at %s is behind a transaction pooler: sessions (LISTEN, "
                     "presence, migrations) use the direct URL", self.target.display)
        return found

    @contextlib.contextmanager
    def _saying_what_it_waits_for(self, what: str) -> Iterator[None]:
        """Say in a log line, once, when `what` has waited `_QUIET_FOR` s
        unanswered: most likely a pooler's queue is full (every server
        connection it may open is held), and it answers only when one frees
        or its query_wait_timeout ends the wait."""
        loop = asyncio.get_running_loop()
        timer = loop.call_later(_QUIET_FOR, lambda: log.warning(
            "PostgreSQL at %s has not answered %s for %g s: a pooler in front of it may "
            "have no server connection free (see the connection budget in "
            "docs/guides/platform/postgresql-in-production.md); waiting for its answer or "
            "its query_wait_timeout", self.target.display, what, _QUIET_FOR))
        try:
            yield
        finally:
            timer.cancel()

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def _retry(self, fn: Callable[[bool], Awaitable[T]], what: str) -> T:
        """Call `fn(fresh)` until it does not fail for a lost connection, for at
        most `retry_for` seconds. `fresh` is true after a failure: use a new
        connection of one's own, not the pool (which may hold dead ones)."""
        deadline = time.monotonic() + self.retry_for
        attempt = 0
        while True:
            try:
                return await fn(attempt > 0)
            except UnicodeEncodeError as exc:  # a lone surrogate: the driver cannot send it
                raise errors.StoreRejected(
                    f"PostgreSQL at {self.target.display} cannot be sent a value ({exc}); "
                    "trying again cannot succeed, nothing was written") from None
            except psycopg.Error as exc:
                if not retryable(exc):
                    raise translate(exc, self.target.display) from exc
                left = deadline - time.monotonic()
                if left <= 0 and still_held():
                    left = 2.0  # a live lease holder's write: tried on (see `lease_held`)
                elif left <= 0:
                    raise errors.StoreUnavailable(
                        f"could not {what}: PostgreSQL at {self.target.display} stayed "
                        f"unreachable for {self.retry_for:g} s ({self._why(exc)}); nothing was "
                        "written that was not confirmed, try again"
                    ) from exc
                if not refused(exc):
                    await self._purge()
                delay = min(backoff(attempt), left)
                seam.retried("conflict" if refused(exc) else "connection")
                log.warning("PostgreSQL at %s: %s; retrying in %.2f s",
                            self.target.display, self._why(exc), delay)
                attempt += 1
                await asyncio.sleep(delay)

    def _why(self, exc: psycopg.Error) -> str:
        """`exc`, naming the wait when it was one for a connection."""
        if isinstance(exc, PoolTimeout):
            return (f"waited for a connection of this process's pool, all "
                    f"{self.target.pool_size} busy (pool_size in the URL, or "
                    f"{POOL_SIZE_ENV}): {exc}")
        if "query_wait_timeout" in str(exc):
            return ("waited in the pooler's queue for a server connection until its "
                    f"query_wait_timeout: every one it may open is held ({exc})")
        return str(exc)

    async def _purge(self) -> None:
        """After a lost connection, test the idle ones too and replace the dead
        (after a server restart every pooled connection is dead)."""
        if self._pool is not None:
            try:
                await self._pool.check()
            except Exception as exc:  # the pool refills itself; the retry goes on
                log.debug("pool check failed: %s", exc)

    @contextlib.asynccontextmanager
    async def _connection(self, fresh: bool) -> AsyncIterator[Conn]:
        if self._pool is None:
            raise errors.StoreError("store is closed")
        if not fresh:
            async with self._pool.connection(timeout=min(self.retry_for, 5.0)) as conn:
                try:
                    yield conn
                except psycopg.Error as exc:
                    if replanned(exc):
                        await conn.close()  # the pool discards it
                    raise
            return
        conn = await self.connect()
        try:
            yield conn
        finally:
            await conn.close()

    async def read(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run `fn` (reads only) on a pooled connection, retried on connection loss."""
        async def once(fresh: bool) -> T:
            async with self._connection(fresh) as conn:
                return await fn(conn)

        return await self._retry(once, "read")

    async def write(
        self, fn: Callable[[Conn], Awaitable[T]], *, verify: Verify[T] | None = None,
        unknown: bool = False, autocommit: bool = False, pipelined: bool = False,
    ) -> T:
        """Run `fn` in one transaction and commit it, counting the commit.

        If the connection drops before COMMIT, `fn` runs again on another
        connection. If it drops during COMMIT, `verify` reads back whether the
        write landed (given what `fn` computed before the commit, if it did):
        its result is returned if so; on `NOT_LANDED` `fn` runs again. Without
        `verify`, `fn` must be safe to run twice (it is, for renew, release,
        cancel and migrations). `unknown`: an earlier attempt
        elsewhere may have committed this write, so read back first.

        `autocommit`: `fn` writes with ONE statement (reads may come before
        it), which commits on its own: one round trip, no BEGIN and COMMIT. A
        connection lost while `fn` runs leaves the outcome unknown.

        `pipelined`: the transaction runs in a psycopg pipeline (see
        `seam.Writing.pipelined`); COMMIT's answer comes at the pipeline's end,
        so a connection lost there leaves the outcome unknown as ever. Not
        through a transaction pooler's scoped connection (its statements each
        bring their own BEGIN and COMMIT)."""

        attempted: T | None = None

        async def once(fresh: bool) -> T:
            nonlocal unknown, attempted
            async with self._connection(fresh) as conn:
                if unknown and verify is not None:
                    found = await verify(conn, attempted)
                    if not isinstance(found, NotLanded):
                        log.warning("a write whose commit was not acknowledged had landed: "
                                    "not writing it again")
                        self.commits += 1
                        return found
                    log.warning("a write whose commit was not acknowledged had not landed: "
                                "writing it again")
                unknown = False
                attempted = None
                body_done = False
                result = _MISSING
                try:
                    if autocommit:
                        body_done = True  # the statement may commit as it runs
                        result = await fn(conn)
                    elif pipelined and not conn.scoped:
                        # psycopg's transaction block syncs after BEGIN and
                        # before COMMIT, two round trips more: here BEGIN goes
                        # out with `fn`'s first statement, COMMIT with its last,
                        # and the pipeline's end answers it (an error of a
                        # statement `fn` sent unanswered shows there too).
                        try:
                            async with conn.pipeline():
                                await conn.execute(b"BEGIN", prepare=False)
                                result = await fn(conn)
                                body_done = True
                                await conn.execute(b"COMMIT", prepare=False)
                        except BaseException:
                            await _roll_back(conn)
                            raise
                    else:
                        async with conn.transaction():
                            result = await fn(conn)
                            body_done = True
                except psycopg.OperationalError as exc:
                    # Raised by COMMIT itself (or by a statement that commits on
                    # its own): the outcome is unknown unless the server said it
                    # rolled back.
                    unknown = body_done and not isinstance(exc, pg_errors.TransactionRollback)
                    attempted = None if result is _MISSING else result
                    raise
                self.commits += 1
                return result

        return await self._retry(once, "write")
