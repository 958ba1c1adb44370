"""stead through PgBouncer (Debian's, started by tests/pgbouncer.py), with
real worker processes: transaction pooling with and without a direct URL,
session pooling with the pooler restarted under live workers, and a pooler
whose server connections are all held.

The workers are tests/workers/liveness_worker.py: steps that sleep, and a
payment (an effect with `check=`) whose sends and landings go to a ledger
file, so a test counts what ran or was paid twice."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import stead
from stead import errors
from tests import pg
from tests.pgbouncer import PgBouncer
from tests.test_liveness_processes import Fleet, _check_once, _settled
from tests.workers.procs import DEADLINE, SLOW, wait_until

pytestmark = pytest.mark.slow
_SERVER = ("127.0.0.1", 5432)


@pytest.fixture
def no_direct_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers this test starts get no STEAD_PG_DIRECT_URL (a pooler
    pass of CI sets one for every test)."""
    monkeypatch.delenv("STEAD_PG_DIRECT_URL", raising=False)


@pytest.fixture
def server_url() -> Iterator[str]:
    """A schema on the server itself (not through the session's pooler, if any)."""
    pg.require()
    with pg.fresh_schema(pg.URL) as url:
        yield url


@pytest.fixture
async def store(server_url: str) -> AsyncIterator[stead.Store]:
    s = await stead.open_store(server_url)
    yield s
    await s.close()


async def _start(store: stead.Store, runs: int, steps: int, send: float) -> list[str]:
    client = stead.Client(store)
    return [(await client.start("charge", steps, 0.05, send, version=1)).run_id
            for _ in range(runs)]


@pytest.mark.parametrize("direct", [False, True], ids=["polling", "direct-url"])
async def test_two_workers_through_transaction_pooling_finish_everything_once(
    tmp_path: Path, server_url: str, store: stead.Store, no_direct_url: None,
    monkeypatch: pytest.MonkeyPatch, direct: bool,
) -> None:
    """Behind PgBouncer in transaction pooling (where each transaction may
    run on another server backend), two workers finish 12 runs of steps with
    a sleep and a payment: no step runs twice, no payment is sent twice."""
    if direct:
        monkeypatch.setenv("STEAD_PG_DIRECT_URL", pg.URL)
    with PgBouncer("transaction", _SERVER, pool_size=4) as bouncer:
        fleet = Fleet(tmp_path, bouncer.url(server_url))
        try:
            run_ids = await _start(store, 12, 6, 0.2)
            fleet.start("a")
            fleet.start("b")
            deadline = time.monotonic() + 120 * SLOW
            while not await _settled(store, run_ids):
                for worker_id, proc in fleet.procs.items():
                    assert proc.poll() is None, fleet.output(worker_id)
                assert time.monotonic() < deadline, fleet.output("a")
                await asyncio.sleep(0.2)
            await _check_once(fleet, store, run_ids, 6, taken_over=False)
            for worker_id in ("a", "b"):
                # One line says what it cannot use, and only when it cannot.
                said = fleet.output(worker_id).count("no direct URL is given")
                assert said == (0 if direct else 1), fleet.output(worker_id)
                assert "prepared statement" not in fleet.output(worker_id)
        finally:
            fleet.stop_all()


async def test_pgbouncer_restarted_under_two_live_workers_takes_no_run_from_them(
    tmp_path: Path, server_url: str, store: stead.Store,
) -> None:
    """Session pooling, PgBouncer stopped and started again (every client and
    server connection cut, the presence locks with them) while two workers
    run: their runs stay theirs, nothing runs or is paid twice."""
    # Each worker holds at most 2 pools of 3, its group commit's, LISTEN and
    # presence connections: 9 (see the connection budget in
    # docs/guides/platform/postgresql-in-production.md).
    with PgBouncer("session", _SERVER, pool_size=30) as bouncer:
        fleet = Fleet(tmp_path, pg.with_query(bouncer.url(server_url), pool_size="3"))
        try:
            run_ids = await _start(store, 12, 8, 0.5)
            fleet.start("a")
            fleet.start("b")
            await wait_until("both workers to run steps",
                             lambda: {w for _r, _s, w in fleet.lines("steps.log")} == {"a", "b"})
            for _ in range(2):
                await asyncio.to_thread(bouncer.restart)
                await asyncio.sleep(1.0)
            await wait_until("the runs to end", lambda: _settled(store, run_ids),
                             timeout=120 * SLOW)
            await _check_once(fleet, store, run_ids, 8, taken_over=False)
        finally:
            fleet.stop_all()


async def test_a_pooler_with_every_server_connection_held_is_named_not_waited_on_silently(
    tmp_path: Path, server_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """A session pool of 6 server connections, two idle workers holding
    them: a client that starts runs either gets a connection or fails with an
    error that names the pooler's wait, within its retry time."""
    with PgBouncer("session", _SERVER, pool_size=6, query_wait_timeout=3) as bouncer:
        url = bouncer.url(server_url)
        fleet = Fleet(tmp_path, url)
        try:
            fleet.start("a")
            fleet.start("b")

            def held() -> bool:
                rows = pg.admin("SELECT count(*) FROM pg_stat_activity "
                                "WHERE application_name LIKE 'stead-w-%'")
                return int(str(rows[0][0])) >= 6

            await wait_until("the idle workers to hold the pooler's 6 connections", held)
            began = time.monotonic()
            try:
                s = await stead.open_store(url, retry_for=8.0)
            except errors.StoreUnavailable as exc:
                took = time.monotonic() - began
                assert "query_wait_timeout" in str(exc), exc
                assert took < 8.0 + DEADLINE, took
            else:  # a worker let go of one: it works
                await s.close()
        finally:
            fleet.stop_all()



async def test_finding_a_transaction_pooler_prepares_nothing_on_its_backends(
    server_url: str,
) -> None:
    """Telling a transaction pooler takes its question a few times on one
    connection (more on a busy pooler); psycopg prepares a statement from its
    fifth run, and the prepared name then reaches another backend. Asked
    over and over on one connection, every answer is still 'transaction'."""
    from psycopg.rows import dict_row

    from stead.store.postgres import pooler
    from stead.store.postgres.connection import parse_url

    with PgBouncer("transaction", _SERVER, pool_size=4) as bouncer:
        target = parse_url(bouncer.url(server_url))

        async def connect() -> pooler.ScopedConn:
            return await pooler.ScopedConn.connect(
                target.conninfo, autocommit=True, row_factory=dict_row)

        conn = await connect()
        try:
            found = [await pooler.detect(conn, connect) for _ in range(6)]
        finally:
            await conn.close()
        assert found == [pooler.Pooling.TRANSACTION] * 6
