"""Which SQLite commits wait for the disk: every one but a claim's (see
`Connector.transaction`). Each commit is told apart by the `synchronous`
level its connection had when it ran, read from the statements SQLite
traced; the level is FULL again after every claim, one that failed too."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import stead
from stead.errors import StoreError
from stead.queues import Queue
from stead.records import Fence, NewRun, Record, RunStatus
from stead.store.sqlite.database import SQLiteDatabase
from stead.tenants import fair

HOSTED = ["wf@1"]
LEASE = 30.0
FULL, NORMAL = 2, 1


class Traced:
    """The statements run on the store's connections, and the `synchronous`
    level each COMMIT ran at."""

    def __init__(self, store: stead.Store) -> None:
        database = store.database
        assert isinstance(database, SQLiteDatabase)
        self.connector = database._db
        self.statements: list[str] = []
        for conn in self.connections():
            conn.set_trace_callback(self.statements.append)

    def connections(self) -> list[sqlite3.Connection]:
        conns = [self.connector._conn, self.connector._inline]
        return [c for c in conns if c is not None]

    async def commits_of(self, call: Callable[[], Awaitable[Any]]) -> list[int]:
        """The `synchronous` level of each commit `call` made."""
        self.statements.clear()
        await call()
        level, levels = FULL, []
        for text in self.statements:
            said = text.strip().upper().replace(" ", "")
            if said == "PRAGMASYNCHRONOUS=NORMAL":
                level = NORMAL
            elif said == "PRAGMASYNCHRONOUS=FULL":
                level = FULL
            elif said == "COMMIT":
                levels.append(level)
        return levels

    def levels_now(self) -> list[int]:
        return [int(c.execute("PRAGMA synchronous").fetchone()[0]) for c in self.connections()]


def _rec(seq: int, epoch: int) -> Record:
    return Record(seq=seq, addr=str(seq), attempt=1, kind="step", name="s", digest="d",
                  status="ok", payload="1", epoch=epoch, at=0.0)


async def _new(store: stead.Store, run_id: str, **more: Any) -> None:
    await store.create_run(NewRun(run_id, "wf", 1, None, '{"args":[],"kwargs":{}}', **more))


@pytest.mark.sqlite_only
async def test_a_claim_commits_without_its_sync_and_every_other_write_with_it(
    store: stead.Store,
) -> None:
    traced = Traced(store)
    assert await traced.commits_of(lambda: _new(store, "r1")) == [FULL]

    claimed: list[Any] = []

    async def claim() -> None:
        claimed.extend(await store.claim("w1", HOSTED, LEASE, 5))

    assert await traced.commits_of(claim) == [NORMAL]
    [row] = claimed
    assert traced.levels_now() == [FULL, FULL]
    # The run's first record after the claim is synced, and the end of its attempt.
    fence = Fence(row.run_id, row.epoch, "w1")
    assert await traced.commits_of(lambda: store.append(fence, [_rec(1, row.epoch)])) == [FULL]
    assert await traced.commits_of(
        lambda: store.finish(fence, RunStatus.COMPLETED, result="1")) == [FULL]
    # An idle poll commits nothing.
    assert await traced.commits_of(lambda: store.claim("w1", HOSTED, LEASE, 5)) == []


@pytest.mark.sqlite_only
async def test_queue_and_fair_claims_commit_without_their_sync(store: stead.Store) -> None:
    traced = Traced(store)
    queue = Queue("limited", concurrency=1)
    await _new(store, "q1", queue="limited")
    await _new(store, "a1", tenant="a")
    await _new(store, "b1", tenant="b")
    got: list[Any] = []

    async def claim_queue() -> None:
        got.extend(await store.claim_queue(queue, "w1", HOSTED, LEASE, 5))

    async def claim_fair() -> None:
        got.extend(await store.claim_fair(fair.Policy(), "w1", HOSTED, LEASE, 4))

    assert await traced.commits_of(claim_queue) == [NORMAL]
    assert NORMAL in await traced.commits_of(claim_fair)
    assert FULL not in await traced.commits_of(claim_fair)  # nothing left: no commit at all
    assert sorted(r.run_id for r in got) == ["a1", "b1", "q1"]
    assert traced.levels_now() == [FULL, FULL]


@pytest.mark.sqlite_only
async def test_a_claim_that_fails_leaves_its_connection_synced(
    store: stead.Store, tmp_path: Path,
) -> None:
    traced = Traced(store)
    await _new(store, "r1")
    # Another connection holds the file's write lock: the claim's BEGIN IMMEDIATE fails.
    other = sqlite3.connect(tmp_path / "stead.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    for conn in traced.connections():
        conn.execute("PRAGMA busy_timeout=50")
    try:
        with pytest.raises(StoreError):
            await store.claim("w1", HOSTED, LEASE, 5)
        assert traced.levels_now() == [FULL, FULL]
    finally:
        other.execute("ROLLBACK")
        other.close()
    [row] = await store.claim("w1", HOSTED, LEASE, 5)
    assert row.run_id == "r1" and traced.levels_now() == [FULL, FULL]
