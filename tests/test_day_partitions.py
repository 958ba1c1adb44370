"""The journal and the events partitioned by day (PostgreSQL, migration 41):
time-ordered run ids; the online migration of a database the previous
release's schema (38) filled, while writes of the old shape go on; and
retention dropping a day's partitions whole under a short lock, keeping a
day with a run still live. SQLite keeps one journal: retention there is
the per-run delete it was."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import stead
from stead import run_ids
from stead.retention import json_lines
from stead.store import schema_versions, sql_files
from tests import pg

DAY = 86400.0
D0 = dt.datetime(2026, 3, 10, 12, tzinfo=dt.UTC).timestamp()  # noon, UTC
app = stead.App("day-partitions")


async def noop(i: int) -> int:
    return i


@app.workflow(version=1)
async def three(run: stead.Run, i: int) -> int:
    a = await run.step("a", noop, i)
    b = await run.step("b", noop, a)
    return await run.step("c", noop, b)


@app.workflow(version=1)
async def waiting(run: stead.Run) -> str:
    return str(await (await run.wait("approval", token=False)))


# -- run ids -----------------------------------------------------------------------------
def test_run_ids_sort_by_time_and_keep_clear_of_the_old_shape() -> None:
    a, b = run_ids.new(D0), run_ids.new(D0 + 0.002)
    assert len(a) == 40 and run_ids.dated(a) and a < b
    assert run_ids.started(a) == pytest.approx(D0, abs=0.001)
    lo, hi = run_ids.day_bounds(dt.date(2026, 3, 10))
    assert lo <= a < hi and lo <= b < hi and not lo <= run_ids.new(D0 + DAY) < hi
    assert run_ids.PREFIX <= lo < hi <= run_ids.END
    # No id of the old shape falls in the dated range: the 13th hex digit
    # of uuid4 and uuid5 is their version, never the prefix's 7.
    for old in (uuid.uuid4().hex, uuid.uuid5(uuid.NAMESPACE_URL, "x").hex,
                "0000000000004" + "f" * 19, "0000000000005" + "0" * 19):
        assert not run_ids.PREFIX <= old < run_ids.END and not run_ids.dated(old)
    # A child: the same for the same call, in its parent's day; a parent of
    # the old shape keeps uuid5 children.
    child = run_ids.child(a, "3")
    assert child == run_ids.child(a, "3") != run_ids.child(a, "4")
    assert lo <= child < hi and run_ids.dated(child)
    old = uuid.uuid4().hex
    assert run_ids.child(old, "3") == uuid.uuid5(
        uuid.UUID("5e1d2c0a-9b7f-4c2e-8d1a-3f6b0c9e7a21"), f"{old}/3").hex


# -- the online migration ----------------------------------------------------------------
@pytest.fixture
def schema38() -> Iterator[str]:
    """A URL on a schema the migrations up to 38 made (the previous release's),
    with no stead process on it yet."""
    pg.require()
    import psycopg

    with pg.fresh_schema(pg.URL) as url:
        name = pg.query_param(url, "schema")
        q = sql_files.queries("postgres")
        with psycopg.connect(pg.URL, autocommit=True) as conn, conn.transaction():
            conn.execute(q["name_schema"].encode(), {"schema": name})
            conn.execute(q["create_schema"].encode())
            conn.execute(f'SET LOCAL search_path = "{name}"'.encode())
            conn.execute(q["create_version_table"].encode())
            for m in schema_versions.known("postgres"):
                if m.version <= 38:
                    conn.execute(m.in_one_transaction().encode())
                    query, params = schema_versions.version_row(m, time.time())
                    conn.execute(q[query].encode(), params)
        yield url


FILL = """
INSERT INTO runs (run_id, workflow, version, status, input, epoch, created_at, updated_at,
                  queue, priority)
SELECT replace(gen_random_uuid()::text, '-', ''), 'three', 1, 'completed',
       '{"args":[1],"kwargs":{}}', 1, %(at)s, %(at)s, 'default', 0
FROM generate_series(1, %(n)s);
INSERT INTO journal (run_id, seq, addr, attempt, kind, name, digest, status, payload, epoch, at)
SELECT r.run_id, s, s::text, 1, 'step', 'noop', 'd', 'ok', '1', 1, %(at)s
FROM runs AS r, generate_series(0, 4) AS s;
INSERT INTO events (run_id, event_id, payload, bind, verdict, received_at)
SELECT run_id, 'e1', '{}', '{}', 'accepted', %(at)s FROM runs;
"""
# What a process of the previous release sends, prepared on its connection:
# inserts naming their columns, and reads with `*`.
OLD_APPEND = ("INSERT INTO journal (run_id, seq, addr, attempt, kind, name, digest, status, "
              "payload, epoch, at) VALUES (%s, %s, %s, 1, 'step', 'noop', 'd', 'ok', '1', 1, 0)")
OLD_EVENT = ("INSERT INTO events (run_id, event_id, payload, bind, verdict, received_at) "
             "VALUES (%s, %s, '{}', '{}', 'accepted', 0)")
OLD_READ = "SELECT * FROM events WHERE run_id = %s AND event_id = %s"


class OldWriter(threading.Thread):
    """Writes and reads of the old shape, one after another on one
    connection with prepared statements, until told to stop: how long
    each took, and what failed."""

    def __init__(self, url: str, runs: list[str]) -> None:
        super().__init__(daemon=True)
        self.url, self.runs = url, runs
        self.stop = threading.Event()
        self.took: list[float] = []
        self.failed: list[str] = []
        self.written = 0

    def run(self) -> None:
        import psycopg

        schema = pg.query_param(self.url, "schema")
        with psycopg.connect(pg.URL, autocommit=True, prepare_threshold=0) as conn:
            conn.execute(f'SET search_path = "{schema}"'.encode())
            i = 0
            while not self.stop.is_set():
                run_id = self.runs[i % len(self.runs)]
                t0 = time.monotonic()
                try:
                    conn.execute(OLD_APPEND.encode(), (run_id, 100 + i, f"w{i}"))
                    conn.execute(OLD_EVENT.encode(), (run_id, f"w{i}"))
                    row = conn.execute(OLD_READ.encode(), (run_id, f"w{i}")).fetchone()
                    assert row is not None and row[1] == f"w{i}"
                    self.written += 1
                except Exception as exc:  # every failure is the finding
                    self.failed.append(f"{type(exc).__name__}: {exc}")
                self.took.append(time.monotonic() - t0)
                i += 1


def _one(url: str, sql: str) -> Any:
    import psycopg

    with psycopg.connect(pg.URL, autocommit=True) as conn:
        conn.execute(f'SET search_path = "{pg.query_param(url, "schema")}"'.encode())
        row = conn.execute(sql.encode()).fetchone()
        return None if row is None else row[0]


async def test_migrating_a_filled_database_online_while_old_writes_go_on(schema38: str) -> None:
    import psycopg

    schema = pg.query_param(schema38, "schema")
    with psycopg.connect(pg.URL, autocommit=True) as conn:
        conn.execute(f'SET search_path = "{schema}"'.encode())
        for part in FILL.split(";\n"):
            if part.strip():
                conn.execute(part.encode(), {"n": 3000, "at": D0 - 30 * DAY})
    runs = [str(r) for r in [_one(schema38, "SELECT min(run_id) FROM runs"),
                             _one(schema38, "SELECT max(run_id) FROM runs")]]
    writer = OldWriter(schema38, runs)
    writer.start()
    try:
        await asyncio.sleep(0.3)
        before = writer.written
        t0 = time.monotonic()
        store = await stead.open_store(schema38)  # migrates: 41 is compatible and online
        migrated = time.monotonic() - t0
        await asyncio.sleep(0.3)
    finally:
        writer.stop.set()
        writer.join(10)
    try:
        assert writer.failed == []
        assert before > 0 and writer.written > before  # writes went on across it
        assert max(writer.took) < 2.0, (max(writer.took), migrated)
        assert _one(schema38, "SELECT relkind FROM pg_class WHERE oid = 'journal'::regclass") == "p"
        assert _one(schema38, "SELECT count(*) FROM journal") == 3000 * 5 + writer.written
        assert _one(schema38, "SELECT count(*) FROM journal_legacy") == 3000 * 5 + writer.written
        assert _one(schema38, "SELECT count(*) FROM events_legacy") == 3000 + writer.written
        assert _one(schema38, "SELECT max(version) FROM stead_schema") == schema_versions.latest()
        # New code's runs go to their day's partition; the old runs read as before.
        client = stead.Client(store, app)
        await store.add_days(time.time())
        info = await client.start(three, 5)
        await stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.02)).run_until_idle()
        assert (await client.result(info.run_id)) == 5
        today = dt.datetime.now(dt.UTC).strftime("%Y%m%d")
        assert _one(schema38, f"SELECT count(*) FROM journal_d{today} "
                              f"WHERE run_id = '{info.run_id}'") >= 3
        assert len(await store.load_journal(runs[0])) >= 5
    finally:
        await store.close()


# -- retention ---------------------------------------------------------------------------
@pytest.fixture
async def dated(db_url: str) -> Any:
    clock = stead.FakeClock()
    clock.t = D0
    store = await stead.open_store(db_url, clock=clock, lease_clock=clock)
    yield store, clock
    await store.close()


async def _finished(store: stead.Store, n: int) -> list[str]:
    client = stead.Client(store, app)
    infos = [await client.start(three, i) for i in range(n)]
    await stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01),
                       clock=store.clock).run_until_idle()
    return [i.run_id for i in infos]


async def test_retention_drops_a_day_whole_and_keeps_a_day_with_a_live_run(
        dated: Any, db_url: str) -> None:
    store, clock = dated
    postgres = db_url.startswith("postgres")
    await store.add_days(D0)  # day 0 and the two after it
    first = await _finished(store, 20)
    clock.t = D0 + DAY
    second = await _finished(store, 5)
    live = await stead.Client(store, app).start(waiting)
    await stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01),
                       clock=clock).run_until_idle()
    day0 = dt.date(2026, 3, 10).strftime("%Y%m%d")
    day1 = dt.date(2026, 3, 11).strftime("%Y%m%d")
    if postgres:
        assert _one(db_url, f"SELECT count(*) FROM journal_d{day0}") >= 20 * 3
        assert _one(db_url, "SELECT count(*) FROM journal_legacy") == 0
    clock.t = D0 + 4 * DAY
    out = io.StringIO()
    report = await stead.prune(store, 2 * DAY, export=json_lines(out))
    assert report.deleted == report.exported == 25
    # Each run written out once, before it went (day 1's too, though its day was kept).
    written = [json.loads(line)["run"]["run_id"] for line in out.getvalue().splitlines()]
    assert sorted(written) == sorted(first + second)
    for run_id in first + second:
        with pytest.raises(stead.errors.UnknownRun):
            await store.get_run(run_id)
    assert (await store.get_run(live.run_id)).status == "waiting"
    assert await store.load_journal(live.run_id) != []
    if postgres:
        # Day 0: every run prunable, its partitions gone whole, under a short lock.
        # (A schema handed on by an earlier test may hold its empty days too: they go as well.)
        assert report.days >= 1 and 0 < report.longest_drop < 1.0
        assert _one(db_url, f"SELECT to_regclass('journal_d{day0}')") is None
        assert _one(db_url, f"SELECT to_regclass('events_d{day0}')") is None
        # Day 1 keeps its live run: its partition stays, its finished runs went row by row.
        assert _one(db_url, f"SELECT count(DISTINCT run_id) FROM journal_d{day1}") == 1
    else:
        assert report.days == 0


async def test_a_day_made_late_takes_in_the_runs_that_came_before_it(pg_url: str) -> None:
    clock = stead.FakeClock()
    clock.t = D0 + 40 * DAY  # no partition made for this day
    store = await stead.open_store(pg_url, clock=clock, lease_clock=clock)
    try:
        run_id = (await stead.Client(store, app).start(three, 1)).run_id
        # A worker whose clock says another day makes that day's partitions, not this one's.
        other = stead.FakeClock()
        other.t = D0
        await stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01),
                           clock=other).run_until_idle()
        day = dt.datetime.fromtimestamp(clock.t, dt.UTC).strftime("%Y%m%d")
        assert _one(pg_url, f"SELECT to_regclass('journal_d{day}')") is None
        assert _one(pg_url, "SELECT count(*) FROM journal_dated_other") >= 3
        assert await store.add_days(clock.t, ahead=0)
        assert _one(pg_url, "SELECT count(*) FROM journal_dated_other") == 0
        assert _one(pg_url, f"SELECT count(*) FROM journal_d{day} "
                            f"WHERE run_id = '{run_id}'") >= 3
        assert [r.seq for r in await store.load_journal(run_id)][:3] == [0, 1, 2]
    finally:
        await store.close()



_gate: dict[str, asyncio.Event] = {}


async def held(i: int) -> int:
    _gate["entered"].set()
    await _gate["go"].wait()
    return i


@app.workflow(version=1)
async def gated(run: stead.Run, i: int) -> int:
    return await run.step("held", held, i)


async def test_a_write_routed_while_its_day_is_attached_is_made_not_refused(
        pg_url: str) -> None:
    """A journal row routed to `journal_dated_other` while another session
    attaches its day's partition is refused by the server (the default
    partition's bounds changed under it): nothing was written, and the same
    write, made again, lands in the new partition. It is retried, not taken
    for bad data that fails the run."""
    import psycopg

    _gate.update(entered=asyncio.Event(), go=asyncio.Event())
    clock = stead.FakeClock()
    clock.t = D0 + 60 * DAY  # no partition made for this day
    day = dt.datetime.fromtimestamp(clock.t, dt.UTC).date()
    schema = pg.query_param(pg_url, "schema")
    store = await stead.open_store(pg_url, clock=clock, lease_clock=clock)
    try:
        run_id = (await stead.Client(store, app).start(gated, 1)).run_id
        other = stead.FakeClock()  # the worker makes other days' partitions
        other.t = D0
        worker = asyncio.create_task(stead.Worker(
            app, store, stead.WorkerOptions(poll_interval=0.01), clock=other,
        ).run_until_idle())
        await asyncio.wait_for(_gate["entered"].wait(), 30)
        with psycopg.connect(pg.URL) as maker:
            maker.execute(f'SET search_path = "{schema}"'.encode())
            assert maker.execute(b"SELECT stead_add_day(%s)", (day,)).fetchone() == (True,)
            # The day is attached, not committed: the step's result routes to
            # journal_dated_other and waits there for the maker's lock.
            _gate["go"].set()
            for _ in range(500):
                waiting = _one(pg_url, "SELECT count(*) FROM pg_locks l JOIN pg_class c "
                                       "ON c.oid = l.relation WHERE NOT l.granted AND "
                                       "c.relname = 'journal_dated_other'")
                if waiting:
                    break
                await asyncio.sleep(0.02)
            assert waiting, "the step's write never waited on the default partition"
            maker.commit()
        await asyncio.wait_for(worker, 30)
        assert (await store.get_run(run_id)).status == "completed"
        assert _one(pg_url, f"SELECT count(*) FROM journal_d{day:%Y%m%d} "
                            f"WHERE run_id = '{run_id}'") >= 1
        assert _one(pg_url, "SELECT count(*) FROM journal_dated_other") == 0
    finally:
        await store.close()


async def test_a_long_transaction_delays_neither_retention_nor_the_fleet(pg_url: str) -> None:
    """Someone's long transaction reads the journal (an analyst's query, an
    export): dropping a day, or making one, must queue for its lock only
    for its lock_timeout, once, not for the store's whole retry window (each
    wait holds every query queued behind it); the prune reports the day
    kept, drops it once the transaction has ended, and the worker tries
    making days again later."""
    import psycopg

    clock = stead.FakeClock()
    clock.t = D0 + 80 * DAY
    schema = pg.query_param(pg_url, "schema")
    store = await stead.open_store(pg_url, clock=clock, lease_clock=clock)
    try:
        await store.add_days(clock.t)
        await _finished(store, 3)
        clock.t += 4 * DAY
        with psycopg.connect(pg.URL) as reader:
            reader.execute(f'SET search_path = "{schema}"'.encode())
            reader.execute(b"SELECT count(*) FROM journal").fetchone()  # holds its locks
            # The fleet reads and writes on meanwhile: no call of it waits long.
            live = (await stead.Client(store, app).start(waiting)).run_id
            slowest = 0.0
            pruned = False

            async def fleet() -> None:
                nonlocal slowest
                i = 0
                while not pruned:
                    t = time.monotonic()
                    await store.load_journal(live)
                    slowest = max(slowest, time.monotonic() - t)
                    i += 1
                    await asyncio.sleep(0.01)

            beside = asyncio.create_task(fleet())
            t0 = time.monotonic()
            report = await stead.prune(store, 2 * DAY)
            took = time.monotonic() - t0
            pruned = True
            await beside
            assert report.deleted == 3 and report.days == 0  # emptied, kept until next time
            assert took < 5, f"the prune waited {took:.1f} s behind a long transaction"
            assert slowest < 2.5, f"a journal read waited {slowest:.1f} s behind the prune"
            t0 = time.monotonic()
            with pytest.raises(stead.errors.StoreUnavailable, match="gave up waiting"):
                await store.add_days(clock.t + 30 * DAY)
            assert time.monotonic() - t0 < 3
            reader.rollback()
        report = await stead.prune(store, 2 * DAY)
        assert report.days >= 1
        assert await store.add_days(clock.t + 30 * DAY)
    finally:
        await store.close()


async def test_a_worker_that_could_not_make_the_days_tries_again_a_minute_later(
        store: stead.Store, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Not at every heartbeat (each try may wait its lock_timeout behind a long
    transaction), not an hour later (the days are made two ahead: an hour is
    fine, but a failure is worth trying again soon)."""
    clock = stead.FakeClock()
    clock.t = D0
    tries: list[float] = []

    async def refused(now: float, ahead: int = 2, lock_timeout: float = 0.5) -> bool:
        tries.append(now)
        raise stead.errors.StoreUnavailable("gave up waiting for a lock")

    monkeypatch.setattr(store, "add_days", refused)
    claims = stead.Worker(app, store, clock=clock)._claims
    for step in (0, 30, 59, 61, 100, 122):
        clock.t = D0 + step
        await claims.make_days()
    assert [t - D0 for t in tries] == [0, 61, 122]
    assert "could not make the coming days' partitions (tried again in 60 s)" in caplog.text


async def test_a_lock_timeout_set_on_the_role_is_waited_out_again(pg_url: str) -> None:
    """Only stead's own bounded waits (the day functions) give up at once: a
    `lock_timeout` an operator set on the role or in the URL makes a write
    wait for a row lock as before, tried again until the lock is free."""
    import threading

    import psycopg

    schema = pg.query_param(pg_url, "schema")
    bounded = pg_url + "&options=-c%20lock_timeout%3D200"
    store = await stead.open_store(bounded)
    try:
        run_id = (await stead.Client(store, app).start(waiting)).run_id
        held, release = threading.Event(), threading.Event()

        def holder() -> None:
            with psycopg.connect(pg.URL) as conn:
                conn.execute(f'SET search_path = "{schema}"'.encode())
                conn.execute(b"SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (run_id,))
                held.set()
                release.wait(10)

        thread = threading.Thread(target=holder)
        thread.start()
        try:
            assert held.wait(10)
            asyncio.get_running_loop().call_later(1.0, release.set)
            await stead.Client(store, app).cancel(run_id)  # waits out the row lock
        finally:
            release.set()
            thread.join()
        assert (await store.get_run(run_id)).status == "cancelled"
    finally:
        await store.close()
