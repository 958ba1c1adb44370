"""Fenced journal writes on PostgreSQL: one statement each (the fence and the
inserts together), and concurrent ones sharing it (group commit). A stale
fence writes nothing and fails alone; a group that fails otherwise is made
again write by write, each with its own outcome; a group whose commit answer
was lost is settled by reading back, write by write. Also: migrating a
schema-3 database to schema 4 keeps its journal."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from psycopg import sql

import stead
from stead.records import Fence, NewRun, Record, ResumeRecord
from stead.store import sql_files
from stead.store.postgres import connection as pg_connection
from tests import pg


def _rec(seq: int, epoch: int, name: str = "s") -> Record:
    return Record(seq=seq, addr=str(seq), attempt=1, kind="step", name=name, digest="d",
                  status="ok", payload=f'{{"seq": {seq}, "text": "é✓"}}', epoch=epoch, at=0.25)


def _resume(run_id: str, epoch: int, worker: str) -> ResumeRecord:
    return ResumeRecord(run_id=run_id, epoch=epoch, worker_id=worker, at=1.5, from_seq=0,
                        code_version="v1", reused=0, detail='{"n": 1}')


async def _claimed(store: stead.Store, n: int, worker: str = "w1") -> list[Fence]:
    for i in range(n):
        await store.create_run(NewRun(f"r{i:02d}", "wf", 1, None, "{}"))
    rows = await store.claim(worker, ["wf@1"], 60, n)
    assert len(rows) == n
    return sorted((Fence(r.run_id, r.epoch, worker) for r in rows), key=lambda f: f.run_id)


# -- one statement ---------------------------------------------------------------------
async def test_a_write_lands_whole_in_one_statement(pstore: stead.Store) -> None:
    first, second = await _claimed(pstore, 2)
    records = [_rec(0, 1, "a"), _rec(1, 1, "b")]
    await pstore.append(first, records, _resume(first.run_id, 1, "w1"))
    await pstore.append(first, [_rec(2, 1, "c")])  # the lone-record statement
    assert await pstore.load_journal(first.run_id) == [*records, _rec(2, 1, "c")]  # as written
    assert await pstore.list_resumes(first.run_id) == [_resume(first.run_id, 1, "w1")]
    await pstore.finish(first, "completed", result="7", records=[_rec(3, 1, "d")])
    await pstore.finish(second, "failed", error='{"type": "X"}')  # no record: a lone UPDATE
    row = await pstore.get_run(first.run_id)
    assert (row.status, row.result, row.lease_owner, row.lease_expires_at) == (
        "completed", "7", None, None)
    assert [r.seq for r in await pstore.load_journal(first.run_id)] == [0, 1, 2, 3]
    row = await pstore.get_run(second.run_id)
    assert (row.status, row.error, row.lease_owner) == ("failed", '{"type": "X"}', None)


async def test_a_stale_fence_writes_nothing(pstore: stead.Store) -> None:
    [fence] = await _claimed(pstore, 1)
    await pstore.cancel_run(fence.run_id)  # bumps the epoch
    before = pstore.commits
    says = (f"worker w1 no longer holds run {fence.run_id} at epoch 1: it was taken over "
            "or cancelled; the write was rejected")
    with pytest.raises(stead.StaleLease) as caught:
        await pstore.append(fence, [_rec(0, 1)], _resume(fence.run_id, 1, "w1"))
    assert str(caught.value) == says
    with pytest.raises(stead.StaleLease, match="no longer holds"):
        await pstore.append(fence, [_rec(0, 1)])
    with pytest.raises(stead.StaleLease, match="no longer holds"):
        await pstore.finish(fence, "completed", result="1", records=[_rec(0, 1)])
    with pytest.raises(stead.StaleLease, match="no longer holds"):
        await pstore.finish(fence, "completed", result="1")
    assert await pstore.load_journal(fence.run_id) == []
    assert await pstore.list_resumes(fence.run_id) == []
    assert (await pstore.get_run(fence.run_id)).status == "cancelled"
    assert pstore.commits == before  # the stale writes committed nothing


# -- group commit ----------------------------------------------------------------------
async def test_concurrent_writes_share_a_commit_and_a_stale_one_fails_alone(
    pstore: stead.Store,
) -> None:
    fences = await _claimed(pstore, 20)
    await pstore.cancel_run(fences[7].run_id)  # its holder is now stale
    before = pstore.commits
    results = await asyncio.gather(
        *(pstore.append(f, [_rec(0, 1)], _resume(f.run_id, 1, "w1")) for f in fences[:10]),
        *(pstore.finish(f, "completed", result="1", records=[_rec(0, 1)])
          for f in fences[10:]),
        return_exceptions=True,
    )
    assert isinstance(results[7], stead.StaleLease)
    assert results[:7] + results[8:] == [None] * 19
    assert pstore.commits - before < 19  # writes shared commits
    assert await pstore.load_journal(fences[7].run_id) == []
    assert await pstore.list_resumes(fences[7].run_id) == []
    for i, f in enumerate(fences):
        if i == 7:
            continue
        assert [r.seq for r in await pstore.load_journal(f.run_id)] == [0]
        row = await pstore.get_run(f.run_id)
        assert row.status == ("running" if i < 10 else "completed")
        assert len(await pstore.list_resumes(f.run_id)) == (1 if i < 10 else 0)


async def test_two_writes_of_one_run_in_one_group_both_land(pstore: stead.Store) -> None:
    [fence] = await _claimed(pstore, 1)
    await asyncio.gather(pstore.append(fence, [_rec(0, 1)]), pstore.append(fence, [_rec(1, 1)]))
    assert [r.seq for r in await pstore.load_journal(fence.run_id)] == [0, 1]


async def test_a_group_with_a_failing_write_is_made_again_one_by_one(
    pstore: stead.Store,
) -> None:
    fences = await _claimed(pstore, 5)
    await pstore.append(fences[2], [_rec(0, 1)])
    before = pstore.commits
    results = await asyncio.gather(
        *(pstore.append(f, [_rec(0, 1)]) for f in fences),  # fences[2]: seq 0 is taken
        return_exceptions=True,
    )
    assert isinstance(results[2], stead.StoreError)
    assert "duplicate key" in str(results[2])
    assert results[:2] + results[3:] == [None] * 4
    assert pstore.commits - before == 4  # the group failed, then each on its own
    for f in fences:
        assert [r.seq for r in await pstore.load_journal(f.run_id)] == [0]


async def test_a_group_whose_commit_answer_was_lost_is_settled_write_by_write(
    pg_url: str, proxy: pg.Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    """The server commits the group, the client never hears it: each write
    reads back that it landed and is not made again; the stale one reads back
    that it did not, is made again, and is refused."""
    store = await stead.open_store(proxy.url(pg_url))
    reader = await stead.open_store(pg_url)
    try:
        first, *fences = await _claimed(store, 7)
        await reader.cancel_run(fences[3].run_id)
        # The first write goes alone; the six that come while it is in flight
        # go together, and the answer to that second commit is lost.
        proxy.lose_at = proxy.commits_seen + 2
        results = await asyncio.gather(store.append(first, [_rec(0, 1)]),
                                       *(store.append(f, [_rec(0, 1)]) for f in fences),
                                       return_exceptions=True)
        assert results[0] is None
        results = results[1:]
        assert proxy.lost_acks == 1
        assert isinstance(results[3], stead.StaleLease)
        assert results[:3] + results[4:] == [None] * 5
        for i, f in enumerate(fences):
            journal = await reader.load_journal(f.run_id)
            assert [r.seq for r in journal] == ([] if i == 3 else [0])
        assert [r for r in caplog.records if "one by one, reading back first" in r.message]
        landed = [r for r in caplog.records if "had landed: not writing it again" in r.message]
        assert len(landed) == 5
    finally:
        await store.close()
        await reader.close()


async def test_a_group_the_server_never_saw_is_written_once(
    pg_url: str, proxy: pg.Proxy
) -> None:
    store = await stead.open_store(proxy.url(pg_url))
    reader = await stead.open_store(pg_url)
    try:
        first, *fences = await _claimed(store, 5)
        proxy.drop_at = proxy.commits_seen + 2  # the group sent while the first is in flight
        await asyncio.gather(store.append(first, [_rec(0, 1)]),
                             *(store.append(f, [_rec(0, 1)]) for f in fences))
        await store.finish(fences[0], "completed", result="1", records=[_rec(1, 1)])
        assert proxy.dropped_commits == 1
        for f in fences:
            assert [r.seq for r in await reader.load_journal(f.run_id)] == (
                [0, 1] if f == fences[0] else [0])
        assert (await reader.get_run(fences[0].run_id)).status == "completed"
    finally:
        await store.close()
        await reader.close()


async def test_the_writer_connection_is_replaced_when_its_session_is_killed(
    pg_url: str,
) -> None:
    store = await stead.open_store(pg_url)
    try:
        [fence] = await _claimed(store, 1)
        await store.append(fence, [_rec(0, 1)])
        pg.terminate(pg.query_param(pg_url, "application_name"))  # the writer's too
        await store.append(fence, [_rec(1, 1)])
        await store.append(fence, [_rec(2, 1)])
        assert [r.seq for r in await store.load_journal(fence.run_id)] == [0, 1, 2]
    finally:
        await store.close()


async def test_tasks_the_store_starts_are_not_branches_of_the_workflow(db_url: str) -> None:
    """A write may start a task inside the store (PostgreSQL's group commit);
    the workflow that wrote must not count it as one of its branches, or the
    addresses of its next gather would differ on replay."""
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> list[int]:
        await run.step("first", lambda: 0)
        return list(await asyncio.gather(*(run.step(f"p{i}", lambda i=i: i) for i in range(2))))

    store = await stead.open_store(db_url)
    try:
        info = await stead.Client(store, app).start(wf)
        await stead.Worker(app, store).run_until_idle()
        journal = await store.load_journal(info.run_id)
        assert {(r.addr, r.name) for r in journal} == {("0", "first"), ("b0.0", "p0"),
                                                       ("b1.0", "p1")}
    finally:
        await store.close()


# -- migration 4 -----------------------------------------------------------------------
async def test_a_schema_3_database_migrates_to_4_keeping_its_journal(new_pg_url: str) -> None:
    pg_url = new_pg_url
    target = pg_connection.parse_url(pg_url)
    schema = sql.Identifier(target.schema)
    conn = await psycopg.AsyncConnection.connect(pg.URL, autocommit=True)
    try:
        await conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
        await conn.execute(sql.SQL("SET search_path = {}").format(schema))
        await conn.execute(b"CREATE TABLE stead_schema (version INTEGER PRIMARY KEY)")
        for version, script in sql_files.migrations("postgres"):
            if version <= 3:
                await conn.execute(script.encode())
                await conn.execute(b"INSERT INTO stead_schema VALUES (%s)", (version,))
    finally:
        await conn.close()
    assert _journal_indexes(target.schema) == {
        "journal_pkey", "journal_run_id_addr_attempt_status_key"}
    # A run leased at epoch 1, inserted as a schema-3 store wrote it (today's
    # start and claim name columns that schema 3 does not have).
    pg.admin(sql.SQL(
        "INSERT INTO {}.runs (run_id, workflow, version, status, input, epoch, lease_owner, "
        "lease_expires_at, created_at, updated_at) "
        "VALUES ('r00', 'wf', 1, 'running', %s, 1, 'w1', %s, 0, 0)").format(schema).as_string(),
        "{}", time.time() + 60)
    fence = Fence("r00", 1, "w1")
    # Its journal as schema-3 code wrote it: the columns that schema has.
    for r in (_rec(0, 1), _rec(1, 1)):
        pg.admin(sql.SQL(
            "INSERT INTO {}.journal (run_id, seq, addr, attempt, kind, name, digest, status, "
            "payload, epoch, at) VALUES ('r00', %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)").format(
            schema).as_string(), r.seq, r.addr, r.attempt, r.kind, r.name, r.digest, r.status,
            r.payload, r.epoch, r.at)
    # Migrates to 4 and on; "all": the jump crosses migrations that are not
    # online, which PostgreSQL's default leaves to `stead db migrate`.
    store = await stead.open_store(pg_url, migrate="all")
    try:
        assert [r.seq for r in await store.load_journal(fence.run_id)] == [0, 1]
        await store.append(fence, [_rec(2, 1)])
        assert [r.seq for r in await store.load_journal(fence.run_id)] == [0, 1, 2]
    finally:
        await store.close()
    versions = pg.admin(sql.SQL("SELECT version FROM {}.stead_schema ORDER BY 1").format(
        schema).as_string())
    assert [v for (v,) in versions] == [v for v, _ in sql_files.migrations("postgres")]
    assert _journal_indexes(target.schema) == {"journal_pkey"}
    # The rows written before schema 41 stay in the journal's DEFAULT partition
    # (0041_day_partitions), whose key keeps the fill factor 0004 gave it.
    [(options,)] = pg.admin(
        "SELECT reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = 'journal_legacy_pkey'", target.schema)
    assert options == ["fillfactor=100"]


def _journal_indexes(schema: str) -> set[object]:
    return {name for (name,) in pg.admin(
        "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = 'journal'",
        schema)}
