"""An SQLite file's schema, brought up to date through the gate of
`schema_versions`: what the file holds is read, judged, and what is pending
is applied in one write transaction. Other processes opening the file at
once wait for that transaction, then find nothing left to do."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterator

from stead import errors
from stead.store import schema_versions, sql_files
from stead.store.schema_versions import Found, LiveWorker, Migrating, Report

Q = sql_files.queries("sqlite")
# Heartbeats this recent count as a live worker on a file before schema 30,
# whose rows name no release (worker_hosts came with schema 8).
_RECENT = 60.0
_HOSTS_FROM = 8


def migrate(conn: sqlite3.Connection, migrating: Migrating, where: str, now: float) -> Report:
    """Judge the file's schema and apply what `migrating` allows, on `conn`
    (autocommit); what was found and applied."""
    found = read(conn)
    report, todo = schema_versions.judge(found, schema_versions.known("sqlite"), migrating,
                                         where)
    if migrating.dry_run and schema_versions.needs_fleet(report.pending):
        return dataclasses.replace(report, live=tuple(live_workers(conn, found, now)))
    if not todo:
        return report
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = read(conn)  # another process may have applied them meanwhile
        todo = tuple(m for m in todo if m.version not in found.applied)
        if schema_versions.needs_fleet(todo):
            schema_versions.check_fleet(todo, live_workers(conn, found, now), where)
        conn.execute(Q["create_version_table"])
        for m in todo:
            for statement in _statements(m.script):
                conn.execute(statement)
            query, params = schema_versions.version_row(m, now)
            conn.execute(Q[query], params)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return dataclasses.replace(report, applied=todo)


def read(conn: sqlite3.Connection) -> Found:
    """The versions the file has applied (none: it has no version table)."""
    if conn.execute(Q["schema_table"]).fetchone() is None:
        return Found(frozenset())
    applied = frozenset(int(r[0]) for r in conn.execute(Q["schema_applied"]))
    known = schema_versions.latest("sqlite")
    if max(applied, default=0) <= known:
        return Found(applied)
    rows = conn.execute(Q["schema_beyond"], {"known": known})
    return Found(applied, tuple(schema_versions.beyond(r) for r in rows))


def live_workers(conn: sqlite3.Connection, found: Found, now: float) -> list[LiveWorker]:
    if found.version >= schema_versions.DESCRIBED_FROM:
        rows = conn.execute(Q["live_worker_versions"], {"now": now})
    elif _HOSTS_FROM in found.applied:
        rows = conn.execute(Q["live_workers_unversioned"], {"since": now - _RECENT})
    else:
        return []
    return [schema_versions.live_worker(r) for r in rows]


def _statements(script: str) -> Iterator[str]:
    """Split a migration into statements (sqlite3 runs one per execute)."""
    buf: list[str] = []
    for line in script.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buf.append(line)
        text = "\n".join(buf)
        if sqlite3.complete_statement(text):
            yield text
            buf = []
    if "\n".join(buf).strip():
        raise errors.StoreError("migration ends with an incomplete statement")
