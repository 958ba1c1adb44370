"""Watching a SQLite file's -wal for writes (`stead.store.sqlite.wal_watch`)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

import stead
from stead.store.sqlite import wal_watch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="inotify is Linux's")


@contextlib.asynccontextmanager
async def _two_stores(tmp_path: Path) -> AsyncIterator[tuple[stead.Store, stead.Store]]:
    """A store, and another on the same file (as another process's)."""
    url = f"sqlite:///{tmp_path}/s.db"
    store = await stead.open_store(url)
    other = await stead.open_store(url)
    try:
        yield store, other
    finally:
        await store.close()
        await other.close()


async def _starter(store: stead.Store) -> Callable[[], Awaitable[object]]:
    """How `store` starts a run of a one-step workflow; one was started
    already, so the -wal exists."""
    app = stead.App("w")

    @app.workflow()
    async def wf(run: stead.Run) -> int:
        return 1

    client = stead.Client(store, app)

    async def start() -> object:
        return await client.start(wf)

    await start()
    return start


def _wal_file(tmp_path: Path) -> tuple[sqlite3.Connection, str]:
    path = str(tmp_path / "w.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    return conn, path


async def test_a_commit_on_another_connection_is_seen_at_once(tmp_path: Path) -> None:
    conn, path = _wal_file(tmp_path)
    watch = wal_watch.open_watch(path)
    assert watch is not None
    try:
        assert not await watch.written(0.01)  # nothing written since it began
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("INSERT INTO t VALUES (1)")
        assert await watch.written(5.0)
        assert not await watch.written(0.01)  # the events were read
    finally:
        watch.close()
        conn.close()


async def test_a_cancelled_wait_ending_late_leaves_the_next_wait_its_reader(
        tmp_path: Path) -> None:
    # A worker's idle wait is cancelled and left to end at its next turn of
    # the loop (`stead.waiting.first`); a wait begun before it ends must keep
    # the descriptor's reader, or a commit would be heard only at its timeout.
    conn, path = _wal_file(tmp_path)
    watch = wal_watch.open_watch(path)
    assert watch is not None
    try:
        old = asyncio.ensure_future(watch.written(30.0))
        await asyncio.sleep(0.01)
        new = asyncio.ensure_future(watch.written(30.0))
        await asyncio.sleep(0.01)  # `new` reads the descriptor now
        old.cancel()
        with pytest.raises(asyncio.CancelledError):
            await old
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("INSERT INTO t VALUES (1)")
        assert await asyncio.wait_for(new, 5.0)
        other.close()
    finally:
        watch.close()
        conn.close()


def test_a_file_without_a_wal_gives_no_watch(tmp_path: Path) -> None:
    assert wal_watch.open_watch(str(tmp_path / "none.db")) is None
    assert wal_watch.open_watch(":memory:") is None


async def test_a_commit_being_made_is_looked_for_closely_and_for_a_bounded_time(
        tmp_path: Path) -> None:
    """`until` looks at sub-millisecond intervals (the loop's own timers
    wake no sooner than a millisecond) and gives up after `within`."""
    conn, path = _wal_file(tmp_path)
    watch = wal_watch.open_watch(path)
    assert watch is not None
    looks: list[float] = []

    def shows_on_the_fifth() -> bool:
        looks.append(time.monotonic())
        return len(looks) == 5

    try:
        assert await watch.until(shows_on_the_fifth, 5.0)
        assert len(looks) == 5
        looks.clear()
        began = time.monotonic()
        assert not await watch.until(lambda: False, 0.05)
        assert 0.05 <= time.monotonic() - began < 5.0  # bounded, however slow the box
    finally:
        watch.close()
        conn.close()


async def test_an_idle_waiter_returns_once_another_connection_commits(
        tmp_path: Path) -> None:
    """The store's wait for work, on a file another connection commits to
    while it waits: it returns for that commit, long before its timeout."""
    async with _two_stores(tmp_path) as (store, other):
        start = await _starter(other)
        waiting = asyncio.ensure_future(store.database.wait_for_work(60.0))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        began = time.monotonic()
        await start()
        await asyncio.wait_for(waiting, 30.0)
        assert time.monotonic() - began < 30.0


async def test_a_poke_is_heard_and_leaves_the_wal_as_it_was(tmp_path: Path) -> None:
    conn, path = _wal_file(tmp_path)
    conn.execute("INSERT INTO t VALUES (1)")
    watch = wal_watch.open_watch(path)
    assert watch is not None
    try:
        wal = Path(path + "-wal")
        before = wal.read_bytes()
        assert not await watch.written(0.01)
        wal_watch.poke(path)
        assert await watch.written(5.0)
        assert wal.read_bytes() == before  # its times, nothing else
        assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]
        wal_watch.poke(str(tmp_path / "none.db"))  # no -wal: nothing to tell, no error
        wal_watch.poke(":memory:")
    finally:
        watch.close()
        conn.close()


async def test_a_delivery_pokes_the_wal_once_its_commit_shows(tmp_path: Path) -> None:
    """A delivery (a write that sends NOTIFY on PostgreSQL) touches the
    -wal's times after its commit: by then another connection sees it."""
    async with _two_stores(tmp_path) as (store, other):
        app = stead.App("w")

        @app.workflow()
        async def wf(run: stead.Run) -> str:
            return str(await (await run.wait("approval", token=False)))

        run_id = (await stead.Client(other, app).start(wf)).run_id
        await stead.Worker(app, other).run_until_idle()  # to its wait
        wal = Path(f"{tmp_path}/s.db-wal")
        seen = store.database._db.data_version()
        touched = wal.stat().st_atime_ns
        await asyncio.sleep(0.02)
        verdict = await stead.Client(other, app).deliver(
            run_id, event_id="e", kind="approval", payload={"ok": True})
        assert isinstance(verdict, stead.Accepted)
        assert wal.stat().st_atime_ns > touched  # writes leave the access time alone
        assert store.database._db.data_version() != seen


async def test_a_start_pokes_the_wal_once_its_commit_shows(tmp_path: Path) -> None:
    """One run's start (`insert_run`, whose NOTIFY on PostgreSQL is part of
    the statement) pokes as a delivery does: the first commit after a
    checkpoint starts the -wal afresh, which a watching connection sees as a
    change before the commit shows, so its frames being written is not
    enough to say when the run can be claimed."""
    async with _two_stores(tmp_path) as (store, other):
        start = await _starter(other)
        wal = Path(f"{tmp_path}/s.db-wal")
        seen = store.database._db.data_version()
        touched = wal.stat().st_atime_ns
        await asyncio.sleep(0.02)
        await start()
        assert wal.stat().st_atime_ns > touched  # writes leave the access time alone
        assert store.database._db.data_version() != seen


async def test_a_commit_that_shows_as_it_is_heard_rings_before_the_wait_goes_on(
        tmp_path: Path) -> None:
    """`written` with a ring: the commit is heard (and seen to show) by the
    descriptor's reader, which rings there, before the waiting task resumes."""
    conn, path = _wal_file(tmp_path)
    conn.execute("INSERT INTO t VALUES (1)")
    watch = wal_watch.open_watch(path)
    assert watch is not None
    rung: list[bool] = []
    waiting: asyncio.Task[bool] | None = None
    try:
        def ring() -> None:
            assert waiting is not None
            rung.append(waiting.done())

        waiting = asyncio.ensure_future(watch.written(60.0, ring, lambda: True))
        await asyncio.sleep(0.05)
        conn.execute("INSERT INTO t VALUES (2)")  # committed and shown before it returns
        assert await asyncio.wait_for(waiting, 30.0)
        assert rung == [False]
        # Without a ring, nothing is called and the wait is the same.
        again = asyncio.ensure_future(watch.written(60.0))
        await asyncio.sleep(0.05)
        conn.execute("INSERT INTO t VALUES (3)")
        assert await asyncio.wait_for(again, 30.0)
        assert rung == [False]
    finally:
        watch.close()
        conn.close()


async def test_a_poke_heard_while_looking_closely_rings(tmp_path: Path) -> None:
    """`until` with a ring hears a `poke` (the commit shows) as it comes."""
    conn, path = _wal_file(tmp_path)
    conn.execute("INSERT INTO t VALUES (1)")
    watch = wal_watch.open_watch(path)
    assert watch is not None
    shown = False
    rung: list[str] = []
    try:
        looking = asyncio.ensure_future(
            watch.until(lambda: shown, 5.0, lambda: rung.append("rung")))
        await asyncio.sleep(0.05)
        shown = True
        wal_watch.poke(path)
        assert await asyncio.wait_for(looking, 10.0)
        assert rung  # heard from the descriptor, if not before the look saw it too
    finally:
        watch.close()
        conn.close()
