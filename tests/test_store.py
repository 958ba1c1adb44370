"""The store, on SQLite and on PostgreSQL: schema, claims, fencing, one commit per write."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

import stead
from stead.records import Fence, NewRun, Record
from stead.store import sql_files


def _rec(seq: int, epoch: int) -> Record:
    return Record(seq=seq, addr=str(seq), attempt=1, kind="step", name="s", digest="d",
                  status="ok", payload="1", epoch=epoch, at=0.0)


async def _new(store: stead.Store, run_id: str = "r1", task_id: str | None = None) -> None:
    await store.create_run(NewRun(run_id, "wf", 1, task_id, '{"args":[],"kwargs":{}}'))


@pytest.mark.sqlite_only
async def test_migrating_an_empty_database_applies_every_migration(
    store: stead.Store, tmp_path: Path
) -> None:
    conn = sqlite3.connect(tmp_path / "stead.db")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"runs", "journal", "resumes", "stead_schema"} <= tables
    versions = [r[0] for r in conn.execute("SELECT version FROM stead_schema")]
    assert versions == [v for v, _ in sql_files.migrations("sqlite")]
    conn.close()


async def test_reopening_and_concurrent_opens_are_safe(db_url: str) -> None:
    stores = await asyncio.gather(*(stead.open_store(db_url) for _ in range(4)))
    again = await stead.open_store(db_url)
    for s in [*stores, again]:
        await s.close()


async def test_claim_bumps_the_epoch_and_honours_the_lease(db_url: str) -> None:
    clock = stead.FakeClock()
    store = await stead.open_store(db_url, clock=clock, lease_clock=clock)
    await _new(store)
    [row] = await store.claim("w1", ["wf@1"], 10, 5)
    assert row.epoch == 1 and row.lease_owner == "w1"
    assert await store.claim("w2", ["wf@1"], 10, 5) == []  # still leased
    clock.advance(11)
    [taken] = await store.claim("w2", ["wf@1"], 10, 5)
    assert taken.epoch == 2 and taken.lease_owner == "w2"
    await store.close()


async def test_a_stale_holder_writes_nothing(db_url: str) -> None:
    clock = stead.FakeClock()
    store = await stead.open_store(db_url, clock=clock, lease_clock=clock)
    await _new(store)
    await store.claim("w1", ["wf@1"], 10, 5)
    clock.advance(11)
    await store.claim("w2", ["wf@1"], 10, 5)
    with pytest.raises(stead.StaleLease):
        await store.append(Fence("r1", 1, "w1"), [_rec(0, 1)])
    with pytest.raises(stead.StaleLease):
        await store.finish(Fence("r1", 1, "w1"), "completed", result="1")
    assert await store.load_journal("r1") == []
    await store.append(Fence("r1", 2, "w2"), [_rec(0, 2)])
    assert [r.seq for r in await store.load_journal("r1")] == [0]
    assert await store.renew([Fence("r1", 1, "w1"), Fence("r1", 2, "w2")], 10) == [
        Fence("r1", 1, "w1")
    ]
    await store.close()


async def test_a_renewal_stores_the_markers_in_flight_under_its_fence(db_url: str) -> None:
    clock = stead.FakeClock()
    store = await stead.open_store(db_url, clock=clock, lease_clock=clock)
    await _new(store)
    await _new(store, "r2")
    await store.claim("w1", ["wf@1"], 10, 5)
    mine, other = Fence("r1", 1, "w1"), Fence("r2", 1, "w1")
    assert await store.renew([mine, other], 10, {mine: '[{"a": 1}]'}) == []
    assert (await store.get_run("r1")).in_flight == '[{"a": 1}]'
    assert (await store.get_run("r2")).in_flight is None
    # A fence not named leaves its run's markers as they are; None clears them.
    assert await store.renew([mine], 10) == []
    assert (await store.get_run("r1")).in_flight == '[{"a": 1}]'
    assert await store.renew([mine], 10, {mine: None}) == []
    assert (await store.get_run("r1")).in_flight is None
    await store.renew([mine], 10, {mine: '[{"a": 2}]'})
    # A holder that lost the run writes no markers over its new holder's.
    clock.advance(11)
    [taken] = await store.claim("w2", ["wf@1"], 10, 5, exclude=["r2"])
    assert taken.in_flight == '[{"a": 2}]'  # what the takeover reads
    assert await store.renew([mine], 10, {mine: '[{"a": 3}]'}) == [mine]
    assert (await store.get_run("r1")).in_flight == '[{"a": 2}]'
    await store.close()


async def test_a_duplicate_position_is_refused_and_rolled_back(store: stead.Store) -> None:
    await _new(store)
    [row] = await store.claim("w1", ["wf@1"], 10, 5)
    fence = Fence("r1", row.epoch, "w1")
    await store.append(fence, [_rec(0, 1)])
    with pytest.raises(stead.StoreError):
        await store.append(fence, [_rec(1, 1), _rec(0, 1)])
    assert [r.seq for r in await store.load_journal("r1")] == [0]  # no half batch


async def test_each_write_is_one_commit(store: stead.Store) -> None:
    await _new(store)
    [row] = await store.claim("w1", ["wf@1"], 10, 5)
    fence = Fence("r1", row.epoch, "w1")
    before = store.commits
    await store.append(fence, [_rec(0, 1), _rec(1, 1)])
    await store.finish(fence, "completed", result="2")
    assert store.commits - before == 2


async def test_only_hosted_versions_are_claimed(store: stead.Store) -> None:
    await _new(store)
    assert await store.claim("w1", ["wf@2", "other@1"], 10, 5) == []
    assert len(await store.claim("w1", ["wf@1"], 10, 5)) == 1


async def test_unknown_run(store: stead.Store) -> None:
    with pytest.raises(stead.UnknownRun):
        await store.get_run("nope")
    with pytest.raises(stead.UnknownRun):
        await store.cancel_run("nope")


async def test_an_unknown_url_scheme_is_a_clear_error() -> None:
    with pytest.raises(stead.StoreError, match="unsupported database URL"):
        await stead.open_store("mysql://localhost/x")


async def _twenty_held_r0_cancelled(store: stead.Store) -> dict[str, Fence]:
    """Runs r0..r19 claimed by w1; r0 then cancelled, so its holder is stale."""
    for i in range(20):
        await _new(store, f"r{i}")
    rows = await store.claim("w1", ["wf@1"], 30, 20)
    await store.cancel_run("r0")
    return {r.run_id: Fence(r.run_id, r.epoch, "w1") for r in rows}


async def test_concurrent_appends_share_commits_and_keep_their_own_fences(
    db_url: str,
) -> None:
    """Group commit: appends waiting together share a transaction, yet a stale
    writer's append fails alone and writes nothing."""
    store = await stead.open_store(db_url)
    try:
        fences = await _twenty_held_r0_cancelled(store)
        before = store.commits
        results = await asyncio.gather(
            *(store.append(fences[f"r{i}"], [_rec(0, 1)]) for i in range(20)),
            return_exceptions=True,
        )
        assert isinstance(results[0], stead.StaleLease)
        assert results[1:] == [None] * 19
        assert store.commits - before < 20  # some appends shared a commit
        assert await store.load_journal("r0") == []
        for i in range(1, 20):
            assert [r.seq for r in await store.load_journal(f"r{i}")] == [0]
    finally:
        await store.close()


async def test_a_duplicate_append_in_a_shared_commit_fails_alone(db_url: str) -> None:
    """An append that fails past its fence (its record is there already) in a
    group commit fails alone: the others land, and it leaves nothing half done."""
    store = await stead.open_store(db_url)
    try:
        fences = await _twenty_held_r0_cancelled(store)
        await store.append(fences["r1"], [_rec(0, 1)])
        results = await asyncio.gather(
            *(store.append(fences[f"r{i}"], [_rec(0, 1), _rec(1, 1)]) for i in range(2, 20)),
            store.append(fences["r1"], [_rec(0, 1), _rec(1, 1)]),  # r1's seq 0 is taken
            return_exceptions=True,
        )
        assert results[:-1] == [None] * 18
        assert isinstance(results[-1], stead.StoreError)
        assert [r.seq for r in await store.load_journal("r1")] == [0]  # not seq 1 alone
        for i in range(2, 20):
            assert [r.seq for r in await store.load_journal(f"r{i}")] == [0, 1]
    finally:
        await store.close()


async def test_concurrent_finishes_share_commits_and_a_stale_one_fails_alone(
    db_url: str,
) -> None:
    """Finishes join the group commit like appends: runs ending together share
    transactions, and a finish whose lease is gone changes nothing of its run."""
    store = await stead.open_store(db_url)
    try:
        fences = await _twenty_held_r0_cancelled(store)
        before = store.commits
        results = await asyncio.gather(
            *(store.finish(fences[f"r{i}"], "completed", result=str(i), records=[_rec(0, 1)])
              for i in range(20)),
            return_exceptions=True,
        )
        assert isinstance(results[0], stead.StaleLease)
        assert results[1:] == [None] * 19
        assert store.commits - before < 20
        r0 = await store.get_run("r0")
        assert r0.status == "cancelled" and r0.result is None
        assert await store.load_journal("r0") == []
        for i in range(1, 20):
            run = await store.get_run(f"r{i}")
            assert (run.status, run.result, run.lease_owner) == ("completed", str(i), None)
            assert [r.seq for r in await store.load_journal(f"r{i}")] == [0]
    finally:
        await store.close()


@pytest.mark.sqlite_only
async def test_a_run_writing_alone_never_waits_on_the_loop_for_another_process(
    db_url: str, tmp_path: Path,
) -> None:
    """A run writing alone commits on the event loop itself; when another
    process holds the file's write lock, its append waits on the store thread
    instead, so the loop keeps running, and it lands once the lock is free."""
    store = await stead.open_store(db_url)
    try:
        await _new(store)
        [row] = await store.claim("w1", ["wf@1"], 30, 1)
        fence = Fence("r1", row.epoch, "w1")
        await store.append(fence, [_rec(0, row.epoch)])  # alone: inline

        other = sqlite3.connect(tmp_path / "stead.db", isolation_level=None,
                                check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # another process's writer, as far as SQLite knows
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        append = asyncio.create_task(store.append(fence, [_rec(1, row.epoch)]))
        await asyncio.sleep(0.3)
        assert not append.done()  # waiting for the lock...
        assert ticks >= 10  # ...off the loop
        other.execute("COMMIT")
        await append
        ticker.cancel()
        other.close()
        assert [r.seq for r in await store.load_journal("r1")] == [0, 1]
    finally:
        await store.close()


async def test_claims_take_pending_expired_and_due_runs_oldest_first(db_url: str) -> None:
    clock = stead.FakeClock()
    store = await stead.open_store(db_url, clock=clock, lease_clock=clock)
    try:
        for name in ("sleeper", "pending-1", "crashed", "pending-2", "napping", "leased"):
            await _new(store, name)
            clock.advance(1)
        # crashed: leased, then its lease ran out; leased: lease still held;
        # sleeper: waiting, due now; napping: waiting, due later.
        for name, wake in (("sleeper", clock.now() + 5), ("napping", clock.now() + 500)):
            [row] = await store.claim("w0", ["wf@1"], 1000, 1, exclude=_others(name))
            await store.suspend(Fence(name, row.epoch, "w0"), [], None, wake, [])
        await store.claim("w0", ["wf@1"], 10, 1, exclude=_others("crashed"))
        clock.advance(20)
        await store.claim("w0", ["wf@1"], 1000, 1, exclude=_others("leased"))
        first = await store.claim("w1", ["wf@1"], 10, 2)
        assert {r.run_id for r in first} == {"sleeper", "pending-1"}
        then = await store.claim("w1", ["wf@1"], 10, 10)
        assert {r.run_id for r in then} == {"crashed", "pending-2"}
        assert await store.claim("w2", ["wf@1"], 10, 10) == []
    finally:
        await store.close()


def _others(name: str) -> list[str]:
    return [n for n in ("sleeper", "pending-1", "crashed", "pending-2", "napping", "leased")
            if n != name]
