"""A PostgreSQL schema, brought up to date through the gate of
`schema_versions` without stopping the fleet that runs on it:

- one opener at a time migrates a schema, under an advisory lock keyed by
  it; the lock is tried, never waited for inside a transaction (see
  `try_migrate_lock`), and others that find it taken look again shortly;
- each statement of a migration waits at most `lock_timeout` for a lock, for
  while it waits every statement that needs the table queues behind it; a
  migration that timed out is rolled back and tried again with backoff, for
  up to `patience` seconds, then `MigrationBlocked` names the longest-open
  transaction;
- pending migrations run one transaction for each run of them, except a
  `no-transaction` one (`CREATE INDEX CONCURRENTLY`), which runs statement
  by statement under the session's hold of the same lock;
- a schema created now runs every migration in one transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from stead import errors
from stead.store import schema_versions, sql_files
from stead.store.postgres.connection import DIRECT_URL_ENV, Conn
from stead.store.schema_versions import Found, LiveWorker, Migrating, Migration, Report

log = logging.getLogger("stead.store.postgres")
Q = sql_files.queries("postgres")
# Heartbeats this recent count as a live worker on a schema before 30, whose
# rows name no release (worker_hosts came with schema 8).
_RECENT = 60.0
_HOSTS_FROM = 8
# What a migration that could not take a lock in time raises.
_LOCKED = (pg_errors.LockNotAvailable, pg_errors.DeadlockDetected)


@dataclasses.dataclass(frozen=True)
class _Opener:
    """One opener's migration of one schema."""

    conn: Conn
    schema: str
    migrating: Migrating
    where: str
    now: float


async def migrate(conn: Conn, schema: str, migrating: Migrating, where: str,
                  now: float) -> Report:
    """Judge the schema's version and apply what `migrating` allows, on
    `conn` (autocommit, its search path on `schema`, which may not exist
    yet); what was found and applied."""
    found = await read(conn)
    report, todo = schema_versions.judge(found, schema_versions.known("postgres"), migrating,
                                         where)
    if migrating.dry_run and schema_versions.needs_fleet(report.pending):
        live = await live_workers(conn, found, now)
        return dataclasses.replace(report, live=tuple(live))
    if todo and (await _one(conn, "read_only"))["read_only"]:
        # A hot standby, or a role or database made read-only: it can be read
        # (runs ls/show, the dashboard) once the primary has migrated it.
        raise errors.SchemaBehind(
            f"{where}: the schema is at version {found.version} and this code needs "
            f"{todo[-1].version}, but this server is read-only (a standby, or "
            "default_transaction_read_only): nothing is migrated here. Migrate on the primary "
            "(`stead db migrate`), then read here")
    opener = _Opener(conn, schema, migrating, where, now)
    applied: list[Migration] = []
    for batch in _batches(todo, fresh=found.version == 0):
        applied += await _patiently(opener, batch, fresh=found.version == 0)
    return dataclasses.replace(report, applied=tuple(applied))


def _batches(todo: Sequence[Migration], *, fresh: bool) -> list[list[Migration]]:
    """The transactions `todo` runs in: one for a schema created now, else one
    for each run of transactional migrations and one step for each other."""
    if fresh:
        return [list(todo)] if todo else []
    batches: list[list[Migration]] = []
    for m in todo:
        if m.transaction and batches and batches[-1][-1].transaction:
            batches[-1].append(m)
        else:
            batches.append([m])
    return batches


async def _patiently(opener: _Opener, batch: list[Migration], *,
                     fresh: bool) -> list[Migration]:
    """Apply `batch`, again after a lock timeout, until `patience` runs out."""
    deadline = time.monotonic() + opener.migrating.patience
    attempt = 0
    while True:
        try:
            if fresh or batch[0].transaction:
                return await _in_transaction(opener, batch, fresh=fresh)
            return await _outside_transaction(opener, batch[0])
        except _LOCKED as exc:
            attempt += 1
            left = deadline - time.monotonic()
            held = await _oldest_transaction(opener.conn)
            if left <= 0:
                raise errors.MigrationBlocked(
                    f"{opener.where}: migration {batch[0].label} could not take its locks "
                    f"within {opener.migrating.lock_timeout:g} s in {attempt} tries over "
                    f"{opener.migrating.patience:g} s ({held}); nothing of it was applied. "
                    "Run `stead db migrate` again once that transaction has ended (or with "
                    "a longer --lock-timeout)") from exc
            delay = min(left, min(2.0, 0.1 * 2 ** (attempt - 1)) * random.uniform(0.5, 1))
            log.warning("%s: migration %s waited %g s for a lock (%s); trying again in "
                        "%.2f s", opener.where, batch[0].label,
                        opener.migrating.lock_timeout, held, delay)
            await asyncio.sleep(delay)


async def _in_transaction(opener: _Opener, batch: list[Migration], *,
                          fresh: bool) -> list[Migration]:
    """Apply `batch` in one transaction, under the migration lock."""
    conn, waiting = opener.conn, _Waiting(opener)
    timeout = schema_versions.lock_timeout_setting(opener.migrating.lock_timeout)
    while True:
        async with conn.transaction():
            if await _taken(conn, "try_migrate_lock", opener.schema):
                await conn.execute(Q["set_lock_timeout"], {"lock_timeout": timeout})
                await conn.execute(Q["name_schema"], {"schema": opener.schema})
                await conn.execute(Q["create_schema"])
                await conn.execute(Q["create_version_table"])
                todo = await _still_pending(opener, batch)
                for m in todo:
                    await conn.execute(m.in_one_transaction().encode())
                    await _record(opener, m)
                return todo
        await waiting.pause(batch[0])  # holding no snapshot meanwhile


async def _outside_transaction(opener: _Opener, m: Migration) -> list[Migration]:
    """Apply `m` statement by statement, each its own transaction, under the
    session's hold of the migration lock. No lock_timeout here: an index
    built CONCURRENTLY blocks no reader or writer while it waits."""
    conn, waiting = opener.conn, _Waiting(opener)
    if conn.scoped:
        raise errors.StoreUnavailable(
            f"{opener.where}: migration {m.label} runs outside a transaction under a "
            "session's lock, and this URL goes through a transaction pooler: give a direct "
            f"URL to the server in {DIRECT_URL_ENV} (or run `stead db migrate` with one)")
    while not await _taken(conn, "try_migrate_session_lock", opener.schema):
        await waiting.pause(m)
    try:
        todo = await _still_pending(opener, [m])
        for one in todo:
            for statement in one.statements():
                await conn.execute(statement.encode())
            await _record(opener, one)
        return todo
    finally:
        with contextlib.suppress(psycopg.Error):  # a lost session has released it
            await conn.execute(Q["migrate_unlock"], {"schema": opener.schema})


class _Waiting:
    """Another opener holds the migration lock: look again shortly, for up to
    `patience` seconds."""

    def __init__(self, opener: _Opener) -> None:
        self.opener = opener
        self.deadline = time.monotonic() + opener.migrating.patience
        self.delay = 0.02

    async def pause(self, m: Migration) -> None:
        if time.monotonic() > self.deadline:
            raise errors.MigrationBlocked(
                f"{self.opener.where}: migration {m.label} waited "
                f"{self.opener.migrating.patience:g} s for another process migrating this "
                "schema (it holds stead's migration lock) and applied nothing. Run `stead db "
                "migrate` again once that process is done")
        await asyncio.sleep(self.delay)
        self.delay = min(1.0, self.delay * 2)


async def _still_pending(opener: _Opener, batch: list[Migration]) -> list[Migration]:
    """What of `batch` no other opener applied meanwhile; refused if a
    breaking one would break a live worker of older code."""
    found = await read(opener.conn)
    todo = [m for m in batch if m.version not in found.applied]
    if schema_versions.needs_fleet(todo):
        live = await live_workers(opener.conn, found, opener.now)
        schema_versions.check_fleet(todo, live, opener.where)
    return todo


async def _record(opener: _Opener, m: Migration) -> None:
    query, params = schema_versions.version_row(m, opener.now)
    await opener.conn.execute(Q[query], params)


async def _taken(conn: Conn, query: str, schema: str) -> bool:
    row = await _one(conn, query, {"schema": schema})
    return bool(row and row["taken"])


async def _one(conn: Conn, query: str, params: dict[str, Any] | None = None) -> Any:
    cur = await conn.execute(Q[query], params)
    return await cur.fetchone()


async def read(conn: Conn) -> Found:
    """The versions the schema has applied (none: no version table, or no schema)."""
    present = await _one(conn, "schema_table")
    if not present["present"]:
        return Found(frozenset())
    cur = await conn.execute(Q["schema_applied"])
    applied = frozenset(int(r["version"]) for r in await cur.fetchall())
    known = schema_versions.latest("postgres")
    if max(applied, default=0) <= known:
        return Found(applied)
    cur = await conn.execute(Q["schema_beyond"], {"known": known})
    return Found(applied, tuple(schema_versions.beyond(r) for r in await cur.fetchall()))


async def live_workers(conn: Conn, found: Found, now: float) -> list[LiveWorker]:
    if found.version >= schema_versions.DESCRIBED_FROM:
        cur = await conn.execute(Q["live_worker_versions"], {"now": now})
    elif _HOSTS_FROM in found.applied:
        cur = await conn.execute(Q["live_workers_unversioned"], {"since": now - _RECENT})
    else:
        return []
    return [schema_versions.live_worker(r) for r in await cur.fetchall()]


async def _oldest_transaction(conn: Conn) -> str:
    """The longest-open transaction, as a migration that waited may name it."""
    try:
        row = await _one(conn, "oldest_transaction")
    except psycopg.Error as exc:
        return f"the transactions could not be listed: {exc}"
    if row is None:
        return "no other transaction is open now"
    return (f"the longest-open transaction: pid {row['pid']} "
            f"({row['application_name'] or 'no application name'}), open "
            f"{float(row['seconds']):.0f} s, running {row['query']!r}")
