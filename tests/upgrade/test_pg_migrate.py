"""Migrating a PostgreSQL database that is in use: a migration waits for a
lock no longer than `lock_timeout` (writers queued behind it wait no longer
either), tries again with backoff, and gives up naming the transaction in its
way; processes that open an older database at once migrate it once; an index
is built CONCURRENTLY and left valid."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import stead
from stead.store import schema_versions
from tests import pg, stress
from tests.upgrade import restore

ROOT = Path(__file__).resolve().parents[2]
SLOW = stress.slow()
# The migrations a database stead 0.1.0 wrote gets, as the code declares them.
_PENDING = [m for m in schema_versions.known("postgres") if m.version > 28]
AFTER_28 = [m.version for m in _PENDING]
# How many transactions an opener migrates them in: one for each run of
# transactional migrations, one for each other.
BATCHES_AFTER_28 = sum(1 for i, m in enumerate(_PENDING)
                       if i == 0 or not m.transaction or not _PENDING[i - 1].transaction)


@pytest.fixture
def old_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A database stead 0.1.0 (schema 28) wrote."""
    fixture = next(f for f in restore.every() if f.schema == 28)
    monkeypatch.setenv("STEAD_SECRET", fixture.described["secret"])
    monkeypatch.delenv(schema_versions.ENV, raising=False)
    with restore.postgres(fixture) as url:
        yield url


def _connect(url: str, application_name: str, *,
             autocommit: bool = False) -> psycopg.Connection[tuple[object, ...]]:
    conn = psycopg.connect(url.split("?")[0], application_name=application_name,
                           autocommit=autocommit)
    conn.execute(b"SET search_path = " + restore.SCHEMA.encode())
    return conn


def _version(url: str) -> int:
    with _connect(url, "upgrade-test") as conn:
        row = conn.execute(b"SELECT max(version) FROM stead_schema").fetchone()
        assert row is not None
        return int(str(row[0]))


class Writer:
    """Heartbeats written on and on, on a connection of their own: the
    longest any one waited is how long the migration held writes off."""

    def __init__(self, url: str) -> None:
        self.conn = _connect(url, "upgrade-test-writer", autocommit=True)
        self.longest = 0.0
        self._stop = False

    def run(self) -> None:
        while not self._stop:
            t0 = time.monotonic()
            self.conn.execute(b"UPDATE worker_hosts SET seen_at = seen_at")
            self.longest = max(self.longest, time.monotonic() - t0)
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop = True


async def test_a_migration_that_waits_for_a_lock_gives_up_naming_what_holds_it(
    old_url: str,
) -> None:
    with _connect(old_url, "upgrade-test-blocker") as blocker:
        blocker.execute(b"SELECT count(*) FROM worker_hosts")  # holds its lock until it ends
        with pytest.raises(stead.errors.MigrationBlocked,
                           match=r"migration 00(29 liveness|30 fleet_versions) could not take "
                                 r"its locks within 0.1 s in \d+ tries over 1 s \(the longest-open "
                                 r"transaction: pid \d+ \(upgrade-test-blocker\), open"):
            await stead.store.upgrade(old_url, lock_timeout=0.1, patience=1.0)
        blocker.rollback()
    assert _version(old_url) == 28  # nothing of it was applied


async def test_a_migration_waits_its_patience_for_another_migrating_process(
    old_url: str,
) -> None:
    with _connect(old_url, "upgrade-test-migrator", autocommit=True) as other:
        other.execute(b"SELECT pg_advisory_lock(1937007972, hashtext(%s))", (restore.SCHEMA,))
        with pytest.raises(stead.errors.MigrationBlocked,
                           match=r"migration 0029 liveness waited 0.5 s for another "
                                 r"process migrating this schema"):
            await stead.store.upgrade(old_url, patience=0.5)
    assert _version(old_url) == 28
    await stead.store.upgrade(old_url, patience=5)  # the lock went with that session
    assert _version(old_url) == schema_versions.latest()


async def test_writers_wait_at_most_the_lock_timeout_while_a_migration_waits(
    old_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    hold = 2.0 * SLOW
    writer = Writer(old_url)
    writing = asyncio.create_task(asyncio.to_thread(writer.run))
    blocker = _connect(old_url, "upgrade-test-blocker")
    try:
        blocker.execute(b"SELECT count(*) FROM worker_hosts")
        with caplog.at_level(logging.WARNING, logger="stead.store"):
            migrating = asyncio.create_task(
                stead.store.upgrade(old_url, lock_timeout=0.1, patience=60))
            await asyncio.sleep(hold)
            blocker.rollback()  # the long transaction ends: the next try takes the lock
            report = await migrating
    finally:
        blocker.close()
        writer.stop()
        await writing
        writer.conn.close()
    assert [m.version for m in report.applied] == AFTER_28
    assert re.search(r"migration 00(29 liveness|30 fleet_versions) waited 0.1 s for a lock",
                     caplog.text)
    assert "upgrade-test-blocker" in caplog.text
    # Without a lock timeout the writes would have queued behind the migration
    # for as long as the blocker held on (`hold` seconds).
    assert writer.longest < hold / 2, writer.longest
    assert _version(old_url) == schema_versions.latest()


OPENER = """
import asyncio, sys, stead
async def main():
    store = await stead.open_store(sys.argv[1])
    print(len(store.database.versions.applied))
    await store.close()
asyncio.run(main())
"""


def test_processes_opening_an_older_database_at_once_migrate_it_once(old_url: str) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", OPENER, old_url], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
             for _ in range(4)]
    applied = []
    for proc in procs:
        out, err = proc.communicate(timeout=60 * SLOW)
        assert proc.returncode == 0, err.decode()
        applied.append(int(out))
    # Migrations run in batches (one transaction for each run of transactional
    # ones, then one step for an index built CONCURRENTLY), each under the
    # lock: another opener may take the lock between two batches and apply
    # the next one. What holds is that each migration was applied by exactly
    # one of them.
    assert sum(applied) == len(AFTER_28), applied
    assert applied.count(0) >= len(procs) - BATCHES_AFTER_28, applied
    with _connect(old_url, "upgrade-test") as conn:
        rows = conn.execute(b"SELECT version FROM stead_schema WHERE version > 28").fetchall()
    assert sorted(rows) == [(v,) for v in AFTER_28]


async def test_an_index_built_concurrently_is_left_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = next(f for f in restore.every() if f.schema == 17)
    monkeypatch.setenv("STEAD_SECRET", fixture.described["secret"])
    with restore.postgres(fixture) as url:
        report = await stead.store.upgrade(url)
        assert 26 in [m.version for m in report.applied]
        [m26] = [m for m in report.applied if m.version == 26]
        assert not m26.transaction and m26.online
        with _connect(url, "upgrade-test") as conn:
            rows = conn.execute(
                b"SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                b"JOIN pg_namespace n ON n.oid = c.relnamespace "
                b"WHERE n.nspname = %s AND c.relname = 'runs_created'",
                (restore.SCHEMA,)).fetchall()
        assert rows == [(True,)]
        pg.require()
