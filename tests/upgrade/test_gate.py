"""The schema version gate: what a process does when the database's schema is
behind its code, or ahead of it (see stead/store/schema_versions.py and
docs/guides/platform/upgrading.md)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

import stead
from stead.cli import main
from stead.store import schema_versions
from stead.store.schema_versions import (
    Beyond,
    Found,
    LiveWorker,
    Migrating,
    Migration,
    OnOpen,
)
from tests.upgrade import restore

WHERE = "db"
CODE = [
    Migration(28, "processes", True, True, True, "CREATE TABLE a (x INTEGER);"),
    Migration(29, "index", True, False, True, "CREATE INDEX b ON a (x);"),
    Migration(30, "columns", True, True, True, "ALTER TABLE a ADD COLUMN y TEXT;"),
]


def _found(*versions: int, beyond: Sequence[Beyond] = ()) -> Found:
    return Found(frozenset(versions), tuple(beyond))


def _todo(found: Found, migrating: Migrating) -> list[int]:
    _report, todo = schema_versions.judge(found, CODE, migrating, WHERE)
    return [m.version for m in todo]


# -- the rules, on their own ----------------------------------------------------------------
def test_a_database_at_the_codes_schema_opens_as_it_is() -> None:
    report, todo = schema_versions.judge(_found(28, 29, 30), CODE, Migrating(), WHERE)
    assert todo == () and report.pending == () and report.version == 30


def test_what_opening_applies_follows_the_policy() -> None:
    behind = _found(28)
    assert _todo(behind, Migrating(on_open=OnOpen.ALL)) == [29, 30]
    assert _todo(_found(28, 29), Migrating(on_open=OnOpen.ONLINE)) == [30]
    # A new database is created whatever its migrations take: there is no one to stop.
    assert _todo(_found(), Migrating(on_open=OnOpen.ONLINE)) == [28, 29, 30]
    assert _todo(behind, Migrating(on_open=OnOpen.NONE, explicit=True)) == [29, 30]
    assert _todo(behind, Migrating(on_open=OnOpen.NONE, dry_run=True)) == []


@pytest.mark.parametrize(("found", "policy", "says"), [
    (_found(28), OnOpen.ONLINE, r"at schema 28 and this stead \(.*\) needs schema 30; "
     r"pending: 0029 index, 0030 columns, not applied on open: 0029 index is compatible, "
     r"locking \(STEAD_MIGRATE=online .*\)\. Run `stead db migrate`"),
    (_found(28, 29), OnOpen.NONE, r"pending: 0030 columns, not applied on open: "
     r"STEAD_MIGRATE=none\. Run `stead db migrate`"),
    (_found(), OnOpen.NONE, r"at schema 0 and"),
])
def test_a_database_left_behind_is_refused_in_one_line_naming_both_versions(
    found: Found, policy: OnOpen, says: str,
) -> None:
    with pytest.raises(stead.errors.SchemaBehind, match=says) as raised:
        schema_versions.judge(found, CODE, Migrating(on_open=policy), WHERE)
    assert "\n" not in str(raised.value)


def test_a_database_past_the_code_is_worked_on_while_the_newer_migrations_are_compatible(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ahead = _found(28, 29, 30, 31, beyond=[Beyond(31, "more", True, "0.3.0")])
    with caplog.at_level(logging.WARNING, logger="stead.store"):
        report, todo = schema_versions.judge(ahead, CODE, Migrating(), WHERE)
    assert todo == () and report.in_window
    assert "at schema 31, newer than this stead" in caplog.text
    assert "0031 more is compatible" in caplog.text and "stead 0.3.0 soon" in caplog.text


@pytest.mark.parametrize("compatible", [False, None])
def test_a_breaking_or_undescribed_migration_past_the_code_is_refused(
    compatible: bool | None,
) -> None:
    ahead = _found(28, 29, 30, 31, 32, beyond=[Beyond(31, "more", True, "0.3.0"),
                                               Beyond(32, "rename", compatible, "0.4.0")])
    with pytest.raises(stead.errors.SchemaAhead,
                       match=r"at schema 32, newer than this stead \(.*, schema 30\) can work "
                             r"with: migration 0032 rename changes what older code relies on, "
                             r"so this process writes nothing\. Upgrade it to stead 0\.4\.0"):
        schema_versions.judge(ahead, CODE, Migrating(), WHERE)


def test_a_breaking_migration_is_not_applied_under_live_workers_of_older_code() -> None:
    breaking = [Migration(31, "rename", False, True, True, "")]
    old = LiveWorker("w-old", None, None)
    current = LiveWorker("w-30", "0.2.0", 30)
    with pytest.raises(stead.errors.MigrationBlocked,
                       match=r"migration 0031 rename is breaking and 2 live worker\(s\) run "
                             r"older code: w-old \(stead before 0.2.0, schema unknown\), w-30 "
                             r"\(stead 0.2.0, schema 30\); applying it would break them, so "
                             r"nothing was applied\. Stop those workers"):
        schema_versions.check_fleet(breaking, [old, current], WHERE)
    # A worker whose code knows the migration is not in its way.
    schema_versions.check_fleet(breaking, [LiveWorker("w-31", "0.3.0", 31)], WHERE)
    schema_versions.check_fleet(CODE, [old], WHERE)  # compatible ones break no one


def test_each_migration_declares_what_it_does_to_a_live_fleet() -> None:
    with pytest.raises(ValueError, match="must declare in its header"):
        schema_versions.parse(31, "x", "-- a migration\nCREATE TABLE x (a INTEGER);")
    with pytest.raises(ValueError, match="unknown trait 'quick'"):
        schema_versions.parse(31, "x", "-- upgrade: compatible quick\n")
    index = schema_versions.parse(31, "x", "-- upgrade: compatible online no-transaction\n"
                                           "DROP INDEX CONCURRENTLY IF EXISTS i;\n"
                                           "CREATE INDEX CONCURRENTLY i ON t (a);\n")
    assert not index.transaction and index.traits == "compatible, online, no transaction"
    assert index.statements() == ["DROP INDEX CONCURRENTLY IF EXISTS i;",
                                  "CREATE INDEX CONCURRENTLY i ON t (a);"]
    assert "CONCURRENTLY" not in index.in_one_transaction()
    # A dollar-quoted body is one statement, its inner semicolons and all.
    block = schema_versions.parse(41, "x", "-- upgrade: compatible online no-transaction\n"
                                           "DO $$\nBEGIN\n    -- why\n    SELECT 1;\n"
                                           "    SELECT 2;\nEND\n$$;\nSELECT 3;\n")
    assert block.statements() == ["DO $$\nBEGIN\n    SELECT 1;\n    SELECT 2;\nEND\n$$;",
                                  "SELECT 3;"]
    for dialect in ("sqlite", "postgres"):
        known = schema_versions.known(dialect)  # parses every header, or raises
        assert known[-1].version == schema_versions.latest()
    # What a migration does to older code is the same in both dialects.
    assert [(m.version, m.compatible) for m in schema_versions.known("sqlite")] == [
        (m.version, m.compatible) for m in schema_versions.known("postgres")]


# -- on a database --------------------------------------------------------------------------
def _migrated_past(url: str, version: int, compatible: bool) -> None:
    """As a newer release would: a migration this code does not know."""
    restore.query(url, "INSERT INTO stead_schema (version, name, compatible, applied_at, "
                  "stead_version) VALUES (%s, 'next_thing', %s, 0, '0.3.0')",
             version, compatible)


async def test_workers_record_their_release_and_doctor_shows_the_fleet(
    db_url: str, store: stead.Store,
) -> None:
    app = stead.App("fleet")
    app.workflow(name="noop")(_noop)
    worker = stead.Worker(app, store, stead.WorkerOptions(worker_id="w-new"))
    await worker.run_until_idle()
    await store.heartbeat("w-new", [("noop@1", "hosts")], policy_version=None, live_for=60)
    [host] = [h for h in await store.worker_hosts() if h.worker_id == "w-new"]
    assert (host.stead_version, host.schema_version) == (stead.__version__,
                                                         schema_versions.latest())
    # A worker of a release before 0.2.0 writes its heartbeat without them.
    now = store.clock.now()
    restore.query(db_url, "INSERT INTO worker_hosts (worker_id, code, role, started_at, seen_at, "
                     "live_until) VALUES ('w-old', 'noop@1', 'hosts', %s, %s, %s)",
             now, now, now + 60)
    done = await asyncio.to_thread(CliRunner().invoke, main, ["--db", db_url, "doctor"])
    assert done.exit_code == 0, done.output
    assert f"schema: the database is at {schema_versions.latest()}" in done.output
    assert f"w-new: noop@1 (stead {stead.__version__}, schema " in done.output
    assert "w-old: noop@1 (stead before 0.2.0)" in done.output
    assert "a mixed fleet: 2 releases run" in done.output


async def _noop(run: stead.Run) -> None:
    return None


async def test_a_database_migrated_compatibly_past_the_code_is_worked_on(
    db_url: str, store: stead.Store, caplog: pytest.LogCaptureFixture,
) -> None:
    _migrated_past(db_url, schema_versions.latest() + 1, True)
    with caplog.at_level(logging.WARNING, logger="stead"):
        again = await stead.open_store(db_url)
    try:
        app = stead.App("window")
        app.workflow(name="noop")(_noop)
        info = await stead.Client(again, app).start("noop")
        await stead.Worker(app, again).run_until_idle()
        assert (await stead.Client(again).get(info.run_id)).status == "completed"
    finally:
        await again.close()
    assert "compatible, so this process keeps working" in caplog.text


async def test_a_worker_stops_claiming_once_the_database_moves_past_its_window(
    db_url: str, store: stead.Store,
) -> None:
    app = stead.App("window")
    app.workflow(name="noop")(_noop)
    client = stead.Client(store, app)
    worker = stead.Worker(app, store, stead.WorkerOptions(heartbeat=0.2, poll_interval=0.05))
    working = asyncio.create_task(worker.run())
    first = await client.start("noop")
    assert await client.result(first.run_id, timeout=30) is None
    _migrated_past(db_url, schema_versions.latest() + 1, False)
    with pytest.raises(stead.errors.SchemaAhead, match="this process writes nothing"):
        await asyncio.wait_for(working, 30)
    late = await client.start("noop")
    await asyncio.sleep(0.5)
    assert (await client.get(late.run_id)).status == "pending"
    with pytest.raises(stead.errors.SchemaAhead, match=r"migration \d+ next_thing changes"):
        await stead.open_store(db_url)


def test_an_older_database_waits_for_stead_db_migrate_when_told_to(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fixture = next(f for f in restore.every() if f.schema == 28)
    monkeypatch.setenv("STEAD_SECRET", fixture.described["secret"])
    monkeypatch.setenv(schema_versions.ENV, "none")
    if backend == "sqlite":
        _migrate_by_hand(restore.sqlite(fixture, tmp_path / "old.db"))
        return
    with restore.postgres(fixture) as url:
        _migrate_by_hand(url)


def _migrate_by_hand(url: str) -> None:
    runner = CliRunner()
    refused = runner.invoke(main, ["--db", url, "runs", "ls"])
    assert refused.exit_code == 1
    assert "at schema 28 and this stead" in refused.output
    assert "STEAD_MIGRATE=none. Run `stead db migrate`" in refused.output
    listed = runner.invoke(main, ["--db", url, "db", "migrate", "--dry-run"])
    assert listed.exit_code == 0, listed.output
    dialect = "sqlite" if url.startswith("sqlite") else "postgres"
    after = [m for m in schema_versions.known(dialect) if m.version > 28]
    assert listed.output.splitlines()[1:] == [
        *(f"  {m.label}: {m.traits}" for m in after),
        f"{len(after)} migration(s) would be applied by `stead db migrate` (dry run: "
        "nothing changed)"]
    applied = runner.invoke(main, ["--db", url, "db", "migrate"])
    assert applied.exit_code == 0, applied.output
    assert f"schema 28 -> {after[-1].version}" in applied.output
    for m in after:
        assert f"applied {m.label}: {m.traits}" in applied.output
    listed = runner.invoke(main, ["--db", url, "runs", "ls"])
    assert listed.exit_code == 0 and "approval@1" in listed.output
    [(name, compatible, by)] = restore.query(
        url, "SELECT name, compatible, stead_version FROM stead_schema WHERE version = 30")
    assert (name, bool(compatible), by) == ("fleet_versions", True, stead.__version__)


async def test_live_workers_of_older_code_are_read_from_their_heartbeats(
    db_url: str, store: stead.Store,
) -> None:
    now = store.clock.now()
    await store.heartbeat("w-new", [("a@1", "hosts")], policy_version=None, live_for=60)
    for worker_id, live_until in (("w-old", now + 60), ("w-gone", now - 1)):
        restore.query(db_url, "INSERT INTO worker_hosts (worker_id, code, role, started_at, "
                              "seen_at, live_until) VALUES (%s, 'a@1', 'hosts', %s, %s, %s)",
                      worker_id, now, now, live_until)
    live = await _live_workers(db_url, now)
    assert live == [LiveWorker("w-new", stead.__version__, schema_versions.latest()),
                    LiveWorker("w-old", None, None)]
    breaking = [Migration(schema_versions.latest() + 1, "rename", False, True, True, "")]
    with pytest.raises(stead.errors.MigrationBlocked, match=r"1 live worker\(s\) run older "
                                                            r"code: w-new"):
        schema_versions.check_fleet(breaking[:1], live[:1], WHERE)


async def _live_workers(url: str, now: float) -> list[LiveWorker]:
    found = Found(frozenset({schema_versions.latest()}))
    if url.startswith("sqlite"):
        from stead.store.sqlite import migrate as sqlite_migrate

        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        conn.row_factory = sqlite3.Row
        try:
            return sqlite_migrate.live_workers(conn, found, now)
        finally:
            conn.close()
    from stead.store.postgres import migrate as pg_migrate
    from stead.store.postgres.connection import Connector, parse_url

    conn = await Connector(parse_url(url), retry_for=5).connect()
    try:
        return await pg_migrate.live_workers(conn, found, now)
    finally:
        await conn.close()
