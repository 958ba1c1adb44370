"""News of work rings an idle wait's bell as it comes: `Store.wait_for_work`'s
`ring` is called from where the news is heard (the `-wal`'s watch, the
LISTEN task, a delivery of this process), before the wait itself returns, so
a worker busy with a wave of runs goes on at its next turn of the loop."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time

import pytest

import stead
from stead.records import NewRun

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="SQLite's news is heard through inotify, Linux's")

_START = textwrap.dedent("""
    import asyncio, sys
    import stead
    from stead.records import NewRun

    async def main():
        store = await stead.open_store(sys.argv[1])
        try:
            await store.create_run(NewRun("from-afar", "wf", 1, None, "{}"))
        finally:
            await store.close()

    asyncio.run(main())
""")


async def _ready(store: stead.Store) -> None:
    """The first wait sets up what hears news (LISTEN, the -wal's watch)."""
    await store.create_run(NewRun("first", "wf", 1, None, "{}"))  # the -wal exists from here
    await store.wait_for_work(0.5)


async def _rung_while_waiting(store: stead.Store, news: asyncio.Future[None]) -> list[bool]:
    """For each ring heard while `store` waits for work on a busy loop (each
    turn a few milliseconds, as beside a wave of runs): whether its wait had
    returned already. `news` is made to come once the wait has begun."""
    rung: list[bool] = []
    waiting: asyncio.Task[None] | None = None

    def ring() -> None:
        assert waiting is not None
        rung.append(waiting.done())

    async def busy() -> None:
        while True:
            time.sleep(0.003)  # the loop's turn, taken up by other work
            await asyncio.sleep(0)

    waiting = asyncio.create_task(store.wait_for_work(60.0, ring=ring))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    spinning = asyncio.create_task(busy())
    try:
        news.set_result(None)
        await asyncio.wait_for(waiting, 30.0)  # long before its 60 s
    finally:
        spinning.cancel()
    return rung


async def test_a_commit_of_another_process_rings_before_the_wait_returns(
        store: stead.Store, db_url: str, backend: str) -> None:
    await _ready(store)
    news: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def start_afar() -> None:
        await news
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", _START, db_url)
        assert await proc.wait() == 0

    starting = asyncio.create_task(start_afar())
    rung = await _rung_while_waiting(store, news)
    await starting
    if backend == "postgres":
        assert rung and not rung[0]  # from the LISTEN task
    else:
        # Rung from the -wal's watch when the commit shows as it is heard;
        # one that shows only later is seen by the wait itself (see
        # test_wal_watch for the ring, heard deterministically).
        assert not any(rung)


async def test_a_start_in_this_process_rings_before_the_wait_returns(
        store: stead.Store, db_url: str) -> None:
    await _ready(store)
    other = await stead.open_store(db_url)
    try:
        news: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def start_here() -> None:
            await news
            await other.create_run(NewRun("from-here", "wf", 1, None, "{}"))

        starting = asyncio.create_task(start_here())
        rung = await _rung_while_waiting(store, news)
        await starting
        assert rung and not rung[0]
    finally:
        await other.close()

