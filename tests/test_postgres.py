"""What only the PostgreSQL store has to prove: its schema and URL, migrations
when many processes start at once, isolation of two apps on one server,
LISTEN/NOTIFY wake-ups, and a commit whose answer was lost being settled by
reading back, never by writing twice. (Everything else runs on both stores
through the `db_url` fixture; faults are in test_postgres_faults.py.)"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

import stead
from stead.records import Fence, NewRun, Record
from stead.spend import Price, ReservationState
from stead.store import seam, sql_files
from stead.store.postgres import PostgresStore
from stead.store.postgres import connection as pg_connection
from tests import pg

ROOT = Path(__file__).resolve().parent.parent


def _rec(seq: int, epoch: int, name: str = "s") -> Record:
    return Record(seq=seq, addr=str(seq), attempt=1, kind="step", name=name, digest="d",
                  status="ok", payload="1", epoch=epoch, at=0.0)


def _schema(url: str) -> str:
    return pg_connection.parse_url(url).schema


# -- schema and URL --------------------------------------------------------------------
async def test_opening_creates_the_schema_and_applies_every_migration_once(
    pstore: stead.Store, pg_url: str
) -> None:
    tables = {r[0] for r in pg.admin(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
        _schema(pg_url))}
    assert {"runs", "journal", "resumes", "stead_schema"} <= tables
    every = [v for v, _ in sql_files.migrations("postgres")]
    assert await _versions(pg_url) == every
    # The SQLite and PostgreSQL schemas move together.
    assert every == [v for v, _ in sql_files.migrations("sqlite")]
    again = await stead.open_store(pg_url)  # reopening migrates nothing
    await again.close()
    assert await _versions(pg_url) == every


class _direct:
    """A plain psycopg connection on the store's schema (for reading raw rows)."""

    def __init__(self, url: str) -> None:
        self.connector = pg_connection.Connector(pg_connection.parse_url(url), retry_for=5)

    async def __aenter__(self) -> pg_connection.Conn:
        self.conn = await self.connector.connect()
        return self.conn

    async def __aexit__(self, *exc: object) -> None:
        await self.conn.close()


OPENER = """
import asyncio, sys, stead
async def main():
    store = await stead.open_store(sys.argv[1])
    await store.close()
asyncio.run(main())
"""


def test_processes_opening_a_new_schema_at_once_migrate_it_once(pg_url: str) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", OPENER, pg_url], cwd=ROOT,
                         stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
        for _ in range(5)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
    rows = pg.admin(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s "
        "AND table_name = 'journal'", _schema(pg_url))
    assert rows == [(1,)]
    versions = asyncio.run(_versions(pg_url))
    assert versions == [v for v, _ in sql_files.migrations("postgres")]


async def _versions(url: str) -> list[int]:
    async with _direct(url) as conn:
        cur = await conn.execute("SELECT version FROM stead_schema ORDER BY version")
        return [int(r["version"]) for r in await cur.fetchall()]


@pytest.mark.parametrize(("query", "says"), [
    ("schema=bad-name", "not a plain name"),
    ("schema=1abc", "not a plain name"),
    ("pool_size=0", "pool_size must be a whole number"),
    ("pool_size=many", "pool_size must be a whole number"),
    ("no_such_option=1", "invalid URI query parameter"),
])
async def test_bad_url_options_are_refused_before_connecting(query: str, says: str) -> None:
    url = "postgresql://someone:hunter2@127.0.0.1:1/db?" + query
    started = time.monotonic()
    with pytest.raises(stead.StoreError, match=says) as caught:
        await stead.open_store(url)
    assert "hunter2" not in str(caught.value)
    assert time.monotonic() - started < 5  # refused, not retried


def test_the_url_names_a_schema_and_keeps_libpq_options() -> None:
    t = pg_connection.parse_url("postgres://u:secret@db.example:6543/app?sslmode=require")
    assert (t.schema, t.pool_size) == ("public", 10)
    assert t.conninfo == "postgres://u:secret@db.example:6543/app?sslmode=require"
    assert "secret" not in t.display and "u:***@db.example" in t.display
    t = pg_connection.parse_url("postgresql://h/app?schema=tenant_7&pool_size=3&connect_timeout=2")
    assert (t.schema, t.pool_size) == ("tenant_7", 3)
    assert t.conninfo == "postgresql://h/app?connect_timeout=2"


@pytest.mark.parametrize(("query", "says"), [
    ("pooler=statement", "pooler is one of none, session, transaction"),
    ("prepare_threshold=soon", "prepare_threshold is a whole number or none"),
])
def test_bad_pooler_options_are_refused(query: str, says: str) -> None:
    with pytest.raises(stead.StoreError, match=says):
        pg_connection.parse_url("postgresql://h/app?" + query)


def test_the_url_says_the_pooler_the_pool_size_and_prepare_threshold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from stead.store.postgres.pooler import Pooling

    t = pg_connection.parse_url("postgresql://h/app?pooler=transaction&prepare_threshold=none")
    assert (t.pooling, t.kwargs["prepare_threshold"]) == (Pooling.TRANSACTION, None)
    assert t.conninfo == "postgresql://h/app"
    assert pg_connection.parse_url("postgresql://h/app?prepare_threshold=0").kwargs[
        "prepare_threshold"] == 0
    assert pg_connection.parse_url("postgresql://h/app").pooling is None  # found out on open
    monkeypatch.setenv(pg_connection.POOL_SIZE_ENV, "4")
    assert pg_connection.parse_url("postgresql://h/app").pool_size == 4
    assert pg_connection.parse_url("postgresql://h/app?pool_size=2").pool_size == 2
    # Two hosts, and a libpq option with a space, reach libpq as written.
    t = pg_connection.parse_url("postgresql://u@a:5432,b:5433/app?target_session_attrs="
                                "read-write&options=-c%20statement_timeout%3D5s")
    assert t.conninfo == ("postgresql://u@a:5432,b:5433/app?target_session_attrs=read-write"
                          "&options=-c%20statement_timeout%3D5s")


async def test_a_direct_server_is_not_taken_for_a_pooler(pg_url: str) -> None:
    from stead.store.postgres.pooler import Pooling

    store = await stead.open_store(pg_url)
    try:
        assert store.database._db.pooling is Pooling.NONE  # type: ignore[attr-defined]
    finally:
        await store.close()


@pytest.mark.parametrize("mode", ["transaction", "session"])
async def test_pgbouncer_pooling_is_found_out_on_open(mode: str) -> None:
    from stead.store.postgres.pooler import Pooling
    from tests import pgbouncer

    pg.require()
    with pg.fresh_schema(pg.URL) as url, pgbouncer.PgBouncer(mode, ("127.0.0.1", 5432)) as b:
        store = await stead.open_store(b.url(url))
        try:
            assert store.database._db.pooling is Pooling(mode)  # type: ignore[attr-defined]
            await stead.Client(store).start("some_workflow", version=1)
            assert len(await store.list_runs()) == 1
        finally:
            await store.close()


async def test_an_unreachable_server_is_store_unavailable_after_bounded_retries() -> None:
    pg.require()
    with socket_closed() as port:
        store = PostgresStore(f"postgresql://postgres@127.0.0.1:{port}/test",
                              clock=stead.SystemClock(), retry_for=1.0)
        started = time.monotonic()
        with pytest.raises(stead.StoreUnavailable, match="stayed unreachable for 1 s"):
            await store.open()
        await store.close()
    assert 0.9 < time.monotonic() - started < 15


async def test_a_server_that_refuses_the_database_fails_at_once() -> None:
    pg.require()
    parts = urlsplit(pg.with_query(pg.URL, schema="t_unused"))
    url = urlunsplit(parts._replace(path="/no_such_database_xyz"))
    started = time.monotonic()
    with pytest.raises(stead.StoreUnavailable, match="no_such_database_xyz"):
        await stead.open_store(url)  # default retry_for is 30 s: a refusal is not retried
    assert time.monotonic() - started < 10


class socket_closed:
    """A loopback port with nothing listening on it."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        return None


# -- isolation ---------------------------------------------------------------------
async def test_two_apps_in_two_schemas_do_not_see_each_other() -> None:
    with pg.fresh_schema() as url_a, pg.fresh_schema() as url_b:
        a = await stead.open_store(url_a)
        b = await stead.open_store(url_b)
        try:
            await a.create_run(NewRun("same-id", "wf", 1, "task-1", "{}"))
            _, created = await b.create_run(NewRun("same-id", "wf", 1, "task-1", "{}"))
            assert created, "a task id is unique per app, not per server"
            assert [r.run_id for r in await a.list_runs()] == ["same-id"]
            assert [r.run_id for r in await b.list_runs()] == ["same-id"]

            [claimed] = await a.claim("w", ["wf@1"], 30, 10)
            assert claimed.epoch == 1
            assert (await b.get_run("same-id")).epoch == 0  # untouched
            await a.append(Fence("same-id", 1, "w"), [_rec(0, 1)])
            assert await b.load_journal("same-id") == []
            await b.create_run(NewRun("only-b", "wf", 1, None, "{}"))
            with pytest.raises(stead.UnknownRun):
                await a.get_run("only-b")

            # Notifications are per app too: b's new run does not wake a's workers.
            await a.wait_for_work(5)  # the first wait returns once LISTEN is set up
            await b.create_run(NewRun("b-2", "wf", 1, None, "{}"))
            started = time.monotonic()
            await a.wait_for_work(0.5)
            assert time.monotonic() - started >= 0.45, "woken by another app's run"
            other_a = await stead.open_store(url_a)
            try:
                waiting = asyncio.create_task(a.wait_for_work(30))
                await asyncio.sleep(0.05)
                await other_a.create_run(NewRun("a-2", "wf", 1, None, "{}"))
                await asyncio.wait_for(waiting, 10)  # well before its 30 s
            finally:
                await other_a.close()
        finally:
            await a.close()
            await b.close()


# -- concurrency the database arbitrates ----------------------------------------------
async def test_concurrent_starts_of_one_task_create_one_run(pg_url: str) -> None:
    stores = [await stead.open_store(pg_url) for _ in range(3)]
    try:
        infos = await asyncio.gather(*(
            stead.Client(stores[i % 3]).start("wf", i, version=1, task_id="order-123")
            for i in range(12)
        ))
        assert len({i.run_id for i in infos}) == 1
        assert sum(i.created for i in infos) == 1
        assert len(await stores[0].list_runs()) == 1
    finally:
        for s in stores:
            await s.close()


# -- LISTEN/NOTIFY -------------------------------------------------------------------
def _app(done: Counter[str]) -> stead.App:
    app = stead.App("wake")

    @app.workflow()
    async def hello(run: stead.Run, name: str) -> str:
        def greet() -> str:
            done[name] += 1
            return f"hello {name}"

        return await run.step("greet", greet)

    return app


async def test_wait_for_work_returns_when_another_store_adds_work(pg_url: str) -> None:
    listening, adding = await stead.open_store(pg_url), await stead.open_store(pg_url)
    try:
        await listening.wait_for_work(5)  # returns once LISTEN is in place
        latencies = []
        for i in range(20):
            waiting = asyncio.create_task(listening.wait_for_work(30))
            await asyncio.sleep(0.01)
            started = time.monotonic()
            await adding.create_run(NewRun(f"r{i}", "wf", 1, None, "{}"))
            await asyncio.wait_for(waiting, 10)  # long before its 30 s
            latencies.append(time.monotonic() - started)
    finally:
        await listening.close()
        await adding.close()
    ms = sorted(x * 1000 for x in latencies)
    print(f"\ncommit of a new run -> wait_for_work returns, ms: median {ms[10]:.2f}, "
          f"max {ms[-1]:.2f} (the commit included)")


async def test_an_idle_worker_wakes_on_notify_long_before_its_next_poll(pg_url: str) -> None:
    done: Counter[str] = Counter()
    app = _app(done)
    worker_store = await stead.open_store(pg_url)
    client_store = await stead.open_store(pg_url)
    worker = stead.Worker(app, worker_store, stead.WorkerOptions(poll_interval=60))
    task = asyncio.create_task(worker.run())
    client = stead.Client(client_store, app)
    latencies = []
    try:
        for i in range(5):
            await asyncio.sleep(0.2)  # the worker is idle, 60 s from its next poll
            started = time.monotonic()
            info = await client.start("hello", f"n{i}")
            assert await client.result(info.run_id, timeout=10, poll=0.002) == f"hello n{i}"
            latencies.append(time.monotonic() - started)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
        await worker_store.close()
        await client_store.close()
    assert done == {f"n{i}": 1 for i in range(5)}
    ms = sorted(round(x * 1000, 1) for x in latencies)
    print(f"\nstart -> completed by an idle worker (poll 60 s), ms: {ms}")


async def test_a_released_run_wakes_another_idle_worker(pg_url: str) -> None:
    """Worker A stops gracefully mid-run and releases it; worker B, idle with a
    60 s poll, takes it over at once because the release notified it."""
    gate = asyncio.Event()
    reached = asyncio.Event()
    app = stead.App("handover")

    async def held() -> str:
        reached.set()
        await gate.wait()
        return "held"

    @app.workflow()
    async def wf(run: stead.Run) -> list[str]:
        first = await run.step("held", held)
        return [first, await run.step("after", lambda: "after")]

    a_store, b_store = await stead.open_store(pg_url), await stead.open_store(pg_url)
    try:
        info = await stead.Client(a_store, app).start(wf)
        a = stead.Worker(app, a_store, stead.WorkerOptions(poll_interval=0.01, worker_id="A"))
        a_task = asyncio.create_task(a.run())
        await asyncio.wait_for(reached.wait(), 10)
        b = stead.Worker(app, b_store, stead.WorkerOptions(poll_interval=60, worker_id="B"))
        b_task = asyncio.create_task(b.run())
        await b_store.wait_for_work(5)  # B is listening
        await asyncio.sleep(0.2)  # ...and idle
        a.stop()
        gate.set()
        await asyncio.wait_for(a_task, 10)  # released at the next call boundary
        started = time.monotonic()
        assert await stead.Client(b_store).result(info.run_id, timeout=10, poll=0.002) == [
            "held", "after"
        ]
        print(f"\nrelease -> completed by an idle worker (poll 60 s): "
              f"{(time.monotonic() - started) * 1000:.1f} ms")
        b.stop()
        await asyncio.wait_for(b_task, 10)
        [resume] = await b_store.list_resumes(info.run_id)
        assert (resume.worker_id, resume.epoch) == ("B", 2)
    finally:
        await a_store.close()
        await b_store.close()


# -- commits whose answer was lost ------------------------------------------------------
async def test_a_lost_commit_answer_is_settled_by_reading_back(
    pg_url: str, proxy: pg.Proxy
) -> None:
    """The server commits, the connection drops before the client hears it:
    each write reads back whether it landed, and it did, so it is not redone
    (a retried insert would fail on its key; a retried claim would find the
    run leased; a retried finish would be fenced out)."""
    store = await stead.open_store(proxy.url(pg_url))
    reader = await stead.open_store(pg_url)
    try:
        proxy.acks_to_lose = 1
        row, created = await store.create_run(NewRun("r1", "wf", 1, "t1", "{}"))
        assert (row.run_id, created, proxy.lost_acks) == ("r1", True, 1)
        assert [r.run_id for r in await reader.list_runs()] == ["r1"]

        proxy.acks_to_lose = 1
        [claimed] = await store.claim("w1", ["wf@1"], 30, 5)
        assert (claimed.epoch, claimed.lease_owner, proxy.lost_acks) == (1, "w1", 2)
        fence = Fence("r1", 1, "w1")

        proxy.acks_to_lose = 1
        await store.append(fence, [_rec(0, 1), _rec(1, 1)])
        assert proxy.lost_acks == 3
        assert [r.seq for r in await reader.load_journal("r1")] == [0, 1]

        # A task state's compare-and-set, from a run and from outside (pipelined).
        proxy.acks_to_lose = 1
        state, _ = await store.update_state(fence, [_rec(2, 1)], None, "t1",
                                            lambda current: ('{"n": 1}', "ok", "1"))
        assert state is not None and (state.version, proxy.lost_acks) == (1, 4)
        proxy.acks_to_lose = 1
        state = await store.set_state("t1", lambda current: '{"n": 2}', author="op", why="t")
        assert (state.version, proxy.lost_acks) == (2, 5)
        stored = await reader.read_state("t1")
        assert stored is not None and (stored.version, stored.data) == (2, '{"n": 2}')

        proxy.acks_to_lose = 1
        await store.finish(fence, "completed", result="2", records=[_rec(3, 1)])
        assert proxy.lost_acks == 6
        done = await reader.get_run("r1")
        assert (done.status, done.result, done.epoch) == ("completed", "2", 1)
        assert [r.seq for r in await reader.load_journal("r1")] == [0, 1, 2, 3]
    finally:
        await store.close()
        await reader.close()


def _count_pipelines(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets an item for each psycopg pipeline block entered from now."""
    entered: list[int] = []
    real = pg_connection.Conn.pipeline

    def noted(self: pg_connection.Conn) -> object:
        entered.append(1)
        return real(self)

    monkeypatch.setattr(pg_connection.Conn, "pipeline", noted)
    return entered


async def test_a_takeovers_reads_are_one_pipeline(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A takeover's journal, intents, resume records and task state are read
    together: sent in one psycopg pipeline (one round trip), their answers
    those of the reads made one by one."""
    store = await stead.open_store(pg_url)
    try:
        await store.create_run(NewRun("r1", "wf", 1, "t1", "{}"))
        [row] = await store.claim("w1", ["wf@1"], 30, 1)
        await store.append(Fence("r1", row.epoch, "w1"), [_rec(0, row.epoch), _rec(1, row.epoch)])
        await store.set_state(row.task_key, lambda _: '{"stock": 3}', author="t", why="test")
        pipelines = _count_pipelines(monkeypatch)
        read = await store.takeover_context("r1", journal=True, task_key=row.task_key,
                                            revalidate=True)
        assert pipelines == [1]
        monkeypatch.undo()
        assert read.journal == await store.load_journal("r1")
        assert list(read.intents) == await store.list_intents("r1")
        assert read.last == ((await store.list_resumes("r1")) or [None])[-1]
        assert read.state is not None and read.state == await store.read_state(row.task_key)
        alone = await store.takeover_context("r1", journal=False, task_key=row.task_key,
                                             revalidate=False)
        assert (alone.journal, alone.state) == ([], read.state)
    finally:
        await store.close()


async def test_an_unshared_claim_whose_answer_was_lost_reads_back_its_runs(
    pg_url: str, proxy: pg.Proxy
) -> None:
    """`claim_unshared` commits on its own: its answer lost, it reads back the
    runs it leased (taken once, epoch 1) and the tenants with runs ready."""
    store = await stead.open_store(proxy.url(pg_url))
    try:
        await store.create_run(NewRun("r1", "wf", 1, None, "{}"))
        proxy.acks_to_lose = 1
        got = await store.claim_unshared("w1", ["wf@1"], 30, 5)
        assert proxy.lost_acks == 1
        assert got.tenants == [""]
        assert [(r.run_id, r.epoch, r.lease_owner) for r in got.runs] == [("r1", 1, "w1")]
        assert (await store.claim_unshared("w1", ["wf@1"], 30, 5)).runs == []
    finally:
        await store.close()


async def test_a_commit_the_server_never_saw_is_written_once(
    pg_url: str, proxy: pg.Proxy
) -> None:
    """The connection drops while COMMIT is on its way: the server rolled back,
    the read-back finds nothing, and the write is made again, once."""
    store = await stead.open_store(proxy.url(pg_url))
    reader = await stead.open_store(pg_url)
    try:
        proxy.commits_to_drop = 1
        _, created = await store.create_run(NewRun("r1", "wf", 1, None, "{}"))
        assert created and proxy.dropped_commits == 1
        proxy.commits_to_drop = 1
        # The dropped claim's server session may hold its row lock until it sees
        # the connection gone: meanwhile claims skip the run (claiming nothing is
        # a fine answer). It is never claimed twice: the first claim's epoch is 1.
        deadline = time.monotonic() + 10
        while not (claimed := await store.claim("w1", ["wf@1"], 30, 5)):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        assert [r.epoch for r in claimed] == [1]
        fence = Fence("r1", 1, "w1")
        proxy.commits_to_drop = 1
        await store.append(fence, [_rec(0, 1)])
        proxy.commits_to_drop = 1
        await store.finish(fence, "failed", error='{"type": "X", "message": "no"}')
        assert proxy.dropped_commits == 4
        row = await reader.get_run("r1")
        assert (row.status, row.epoch) == ("failed", 1)
        assert [r.seq for r in await reader.load_journal("r1")] == [0]
    finally:
        await store.close()
        await reader.close()


waiting = stead.App("pipelined_deliveries")


@waiting.workflow()
async def approval(run: stead.Run) -> str:
    return str(await (await run.wait("approval", token=False)))


async def test_a_delivery_is_two_round_trips_and_lands_once_when_its_commit_is_cut(
    pg_url: str, proxy: pg.Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delivery's transaction goes in one pipeline: BEGIN with the run's
    lock and its waits' read, COMMIT with the accepted event (two syncs).
    Its COMMIT answered but the answer lost: read back, accepted once. Its
    COMMIT cut off before the server saw it: rolled back, made again, once.
    A delivery that fails inside (an event the run does not wait for) leaves
    nothing behind and the connection usable."""
    direct = await stead.open_store(pg_url)
    store = await stead.open_store(proxy.url(pg_url))
    try:
        client = stead.Client(store, waiting)
        runs = [(await stead.Client(direct, waiting).start(approval)).run_id for _ in range(3)]
        await stead.Worker(waiting, direct).run_until_idle()
        # A count read inside a pipelined write is the statement's own.
        [open_wait] = await direct.list_waits(run_id=runs[0])

        def unlock() -> seam.Flow[int]:
            return (yield seam.count("unlock_wait", {"wait_id": open_wait.wait_id}))

        assert await store.database.write(unlock, seam.Writing(pipelined=True)) == 1
        syncs = _count_pipelines(monkeypatch)
        assert isinstance(await client.deliver(runs[0], event_id="e0", kind="approval",
                                               payload=0), stead.Accepted)
        assert syncs == [1]  # the write's own pipeline, no block inside it
        monkeypatch.undo()

        proxy.acks_to_lose = 1
        assert isinstance(await client.deliver(runs[1], event_id="e1", kind="approval",
                                               payload=1), stead.Accepted)
        assert proxy.lost_acks == 1
        proxy.commits_to_drop = 1
        assert isinstance(await client.deliver(runs[2], event_id="e2", kind="approval",
                                               payload=2), stead.Accepted)
        assert proxy.dropped_commits == 1
        for i, run_id in enumerate(runs):
            assert [(e.event_id, e.verdict) for e in await direct.list_events(run_id)] == [
                (f"e{i}", "accepted")]
        await stead.Worker(waiting, direct).run_until_idle()
        assert [await client.result(r, timeout=5) for r in runs] == ["0", "1", "2"]
        # Now that no wait is open: refused; the first event again: a duplicate.
        again = await client.deliver(runs[0], event_id="late", kind="approval", payload=9)
        assert not isinstance(again, stead.Accepted)
        assert isinstance(await client.deliver(runs[0], event_id="e0", kind="approval",
                                               payload=0), stead.Duplicate)
    finally:
        await store.close()
        await direct.close()


class _Model:
    """A model answering at once, counting the calls each run sent it."""

    name = "counted"

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    async def complete(self, messages: Sequence[Mapping[str, Any]],
                       **params: Any) -> stead.Completion:
        self.calls[str(messages[0]["content"])] += 1
        return stead.Completion(text="yes", model=self.name,
                                usage=stead.Usage(input_tokens=10, output_tokens=2))


agent_app = stead.App("pipelined_writes")
agent_model = _Model()
agent_sent: Counter[int] = Counter()


@agent_app.workflow()
async def leaf(run: stead.Run, k: int) -> int:
    return k + 1


def _pay(op: stead.Operation, k: int, amount: int) -> int:
    agent_sent[k] += 1
    return amount


@agent_app.workflow()
async def agent(run: stead.Run, k: int) -> list[object]:
    """Each of the writes that go as one pipeline on PostgreSQL: a model
    call's reservation and settlement, a child's start, an expired wait's
    closing and a guarded effect's intent."""
    said = await run.llm("ask", agent_model, [{"role": "user", "content": f"run {k}"}],
                         max_tokens=20)
    child = await run.child(leaf, k)
    wait = await run.wait("never", token=False, expires_in=0.05)
    try:
        await wait
        expired = False
    except stead.errors.WaitExpired:
        expired = True
    paid = await run.effect("pay", _pay, k, amount=3, tool="pay")
    return [said.text, child, expired, paid]


_AGENT_INTENT = stead.Intent(goal="ask and pay", budget=stead.Budget(tokens=10_000),
                             grants=[stead.Grant("pay", {"max_amount": 5})])


async def _agents(pg_url: str, proxy: pg.Proxy, *, cut: bool) -> None:
    """One clean `agent` run (started for a tenant, with an intent: its start
    is a pipelined write too), then one run for each of the commits a run
    makes, start to end, that commit's answer lost (or, `cut`, the commit cut
    off before the server sees it); then each run must have ended with one
    model call sent, one child, one settled reservation and one effect sent."""
    store = await stead.open_store(proxy.url(pg_url))
    reader = await stead.open_store(pg_url)
    options = stead.WorkerOptions(poll_interval=0.05)
    runs: dict[int, str] = {}
    client = stead.Client(store, agent_app)

    async def drive(k: int) -> None:
        runs[k] = (await client.start(agent, k, intent=_AGENT_INTENT, tenant="acme")).run_id
        await stead.Worker(agent_app, store, options).run_until_idle()

    agent_model.calls.clear()
    agent_sent.clear()
    try:
        await reader.set_price("counted", Price(input=1.0, output=2.0))
        before = proxy.commits_seen
        await drive(0)
        each = proxy.commits_seen - before
        for n in range(1, each + 1):
            if cut:
                proxy.drop_at = proxy.commits_seen + n
            else:
                proxy.lose_at = proxy.commits_seen + n
            await drive(100 + n)
        assert (proxy.dropped_commits if cut else proxy.lost_acks) == each
        for k, run_id in runs.items():
            assert await stead.Client(reader).result(run_id, timeout=5) == [
                "yes", k + 1, True, 3], k
            assert agent_model.calls[f"run {k}"] == 1 and agent_sent[k] == 1, k
            held = await reader.reservations(run_id)
            assert [r["state"] for r in held] == [ReservationState.SETTLED], k
            assert len(await reader.children(run_id)) == 1, k
    finally:
        await store.close()
        await reader.close()


async def test_a_runs_pipelined_writes_each_land_once_when_any_commit_answer_is_lost(
    pg_url: str, proxy: pg.Proxy
) -> None:
    """A run whose model call reserves and settles, starts a child, closes an
    expired wait and journals a guarded effect's intent (each such write one
    pipeline on PostgreSQL), once for each of its commits, that commit's
    answer lost: read back, not made again."""
    await _agents(pg_url, proxy, cut=False)


@pytest.mark.slow
async def test_a_runs_pipelined_writes_each_land_once_when_any_commit_is_cut(
    pg_url: str, proxy: pg.Proxy
) -> None:
    """The same run, once for each of its commits, that commit cut off before
    the server sees it: rolled back, made again once."""
    await _agents(pg_url, proxy, cut=True)


async def test_a_pipelined_write_that_fails_inside_leaves_nothing_and_its_pool_usable(
    pg_url: str
) -> None:
    """A statement of a pipelined write fails, its error read only at COMMIT's
    sync: the error is raised, the transaction rolled back (the statement
    before it wrote nothing), and the next writes on the pool work."""
    store = await stead.open_store(pg_url)
    db = store.database._db  # type: ignore[attr-defined]
    try:
        async def failing(conn: pg_connection.Conn) -> None:
            await conn.execute("CREATE TEMP TABLE IF NOT EXISTS kept (n int)")
            await conn.execute("INSERT INTO kept VALUES (1)")
            await conn.execute("SELECT 1 / 0")  # sent, its answer not read

        for _ in range(3):  # more tries than the pool lends connections at first
            with pytest.raises(stead.errors.StoreRejected, match="division by zero"):
                await db.write(failing, pipelined=True)
        _, created = await store.create_run(NewRun("r1", "wf", 1, None, "{}"))
        assert created and [r.run_id for r in await store.list_runs()] == ["r1"]
    finally:
        await store.close()


async def test_workflows_complete_exactly_once_while_commit_answers_are_lost(
    pg_url: str, proxy: pg.Proxy
) -> None:
    calls: Counter[str] = Counter()
    sent: Counter[str] = Counter()
    app = stead.App("lossy")

    def step(name: str, x: int) -> int:
        calls[name] += 1
        return x + 1

    def pay(op: stead.Operation, run_key: str) -> str:
        sent[run_key] += 1
        return f"paid-{op.key}"

    @app.workflow()
    async def wf(run: stead.Run, k: int) -> list[object]:
        a = await run.step("a", step, f"{k}a", k)
        b, c = await asyncio.gather(run.step("b", step, f"{k}b", a),
                                    run.step("c", step, f"{k}c", a))
        receipt = await run.effect("pay", pay, str(k))
        return [a, b, c, receipt.startswith("paid-"), await run.step("d", step, f"{k}d", c)]

    store = await stead.open_store(proxy.url(pg_url))
    reader = await stead.open_store(pg_url)
    try:
        client = stead.Client(store, app)
        proxy.lose_chance = 0.5  # one commit in two: its answer never arrives
        runs = [(await client.start(wf, k)).run_id for k in range(10)]
        await stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.05)).run_until_idle()
        assert proxy.lost_acks >= 10
        for k, run_id in enumerate(runs):
            assert await stead.Client(reader).result(run_id, timeout=5) == [
                k + 1, k + 2, k + 2, True, k + 3
            ]
            journal = await reader.load_journal(run_id)
            assert [r.seq for r in journal] == list(range(len(journal)))
            assert {r.epoch for r in journal} == {1}  # nobody took a run over
        assert calls == {f"{k}{s}": 1 for k in range(10) for s in "abcd"}
        assert sent == {str(k): 1 for k in range(10)}
    finally:
        await store.close()
        await reader.close()


async def test_a_pool_with_every_connection_busy_is_named_not_waited_on_silently(
    pg_url: str,
) -> None:
    """Every connection of the process's pool held: a read waits its retry
    time, then fails naming the wait (a lost connection's kind: transient)."""
    store = await stead.open_store(pg.with_query(pg_url, pool_size="1"), retry_for=1.0)
    try:
        pool = store.database._db._pool  # type: ignore[attr-defined]
        async with pool.connection():
            started = time.monotonic()
            with pytest.raises(stead.StoreUnavailable, match="all 1 busy"):
                await store.get_run("no-such-run")
            assert time.monotonic() - started < 10
    finally:
        await store.close()


async def test_a_migration_that_needs_a_session_refuses_through_a_transaction_pooler(
    pg_url: str,
) -> None:
    """A CONCURRENTLY migration holds a session's lock around its statements:
    on a connection that keeps no session (a transaction pooler, no direct
    URL) it applies nothing and names STEAD_PG_DIRECT_URL."""
    from stead.store import schema_versions
    from stead.store.postgres import migrate
    from stead.store.postgres.pooler import ScopedConn

    concurrent = next(m for m in schema_versions.known("postgres") if not m.transaction)
    target = pg_connection.parse_url(pg_url)
    conn = await ScopedConn.connect(target.conninfo, **target.kwargs)
    try:
        conn.scope(target.schema)
        opener = migrate._Opener(conn, target.schema, schema_versions.Migrating(), "here", 0.0)
        with pytest.raises(stead.StoreUnavailable, match="STEAD_PG_DIRECT_URL"):
            await migrate._outside_transaction(opener, concurrent)
    finally:
        await conn.close()
