"""News of work that comes while a worker's claim looks for runs: the wait
after a claim that found nothing counts from a mark taken before that claim
(`Store.work_mark`), so a run committed while the claim looked is claimed at
once, not at the next commit or poll; and one run's start tells idle workers
once its commit shows (on SQLite, a poke of the `-wal`)."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time

import pytest

import stead
from stead.records import NewRun
from stead.store import seam
from stead.store.sqlite.connection import Connector

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="SQLite's news is heard through inotify, Linux's")

# A poll no test waits for: what wakes the worker here is news, or nothing.
_NEVER = 60.0


async def _ready(store: stead.Store) -> None:
    """The first wait sets up what hears news (LISTEN, the -wal's watch)."""
    await store.create_run(NewRun("first", "wf", 1, None, "{}"))  # the -wal exists from here
    await store.wait_for_work(0.5)


async def test_a_run_started_while_a_claim_looks_is_claimed_at_once(
        store: stead.Store, db_url: str) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        return "done"

    other = await stead.open_store(db_url)  # another connection, as another process's
    started: list[str] = []
    claim_unshared = store.database.claim_unshared

    async def claiming(claim: seam.Claim) -> seam.UnsharedClaim:
        got = await claim_unshared(claim)
        if not got.runs and not started:
            # Committed after the claim looked and before the worker waits: a
            # start that lands while the claim is being made.
            started.append((await stead.Client(other, app).start(wf)).run_id)
        return got

    store.database.claim_unshared = claiming  # type: ignore[method-assign]
    worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=_NEVER))
    working = asyncio.create_task(worker.run())
    try:
        deadline = time.monotonic() + 10.0
        while not started:
            assert time.monotonic() < deadline, "the worker never claimed"
            await asyncio.sleep(0.01)
        result = await stead.Client(store, app).result(started[0], timeout=10.0)
        assert result == "done"
    finally:
        worker.stop()
        await working
        await other.close()


async def test_work_committed_after_a_mark_ends_the_wait_at_once(
        store: stead.Store, db_url: str) -> None:
    await _ready(store)
    other = await stead.open_store(db_url)
    try:
        mark = await store.work_mark()
        await other.create_run(NewRun("after-mark", "wf", 1, None, "{}"))
        began = time.monotonic()
        await store.wait_for_work(30.0, since=mark)
        assert time.monotonic() - began < 5.0
    finally:
        await other.close()


@pytest.mark.sqlite_only
async def test_the_stores_own_commits_since_a_mark_are_no_news(store: stead.Store) -> None:
    await _ready(store)
    mark = await store.work_mark()
    assert mark is not None
    # A commit of this store (a run's step, a start) changes the file's data
    # version too; the wait of this store's own worker is not woken by it.
    await store.create_run(NewRun("own", "wf", 1, None, "{}"))
    began = time.monotonic()
    await store.database.wait_for_work(0.3, since=mark)
    assert time.monotonic() - began >= 0.25


@pytest.mark.sqlite_only
async def test_no_mark_is_taken_while_a_transaction_of_the_store_is_in_flight(
        store: stead.Store) -> None:
    await _ready(store)
    connector: Connector = store.database._db  # type: ignore[attr-defined]
    marks: list[object] = []

    def inside(conn: sqlite3.Connection) -> None:
        with connector.transaction(conn):
            marks.append(connector.mark())

    await asyncio.get_running_loop().run_in_executor(None, connector.on_writer, inside)
    assert marks == [None]
    mark = connector.mark()
    assert mark is not None and connector.seen_at(mark) == mark.version
