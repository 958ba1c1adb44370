"""Two workers, one run: exactly one advances it; the other's writes are
rejected with `StaleLease`, and the journal never has a gap or a duplicate
position. Store objects here are separate connections to one SQLite file, the
way separate worker processes see it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence

import pytest

import stead
from stead.records import Fence, NewRun, Record, ResumeRecord, RunRow
from stead.testing import DelegatingStore
from tests.workers.procs import Workers, check_journal, wait_until

LEASE = 30.0


def _rec(seq: int, epoch: int, name: str = "s") -> Record:
    return Record(seq=seq, addr=str(seq), attempt=1, kind="step", name=name, digest="d",
                  status="ok", payload="1", epoch=epoch, at=0.0)


def _resume(run_id: str, epoch: int, worker_id: str) -> ResumeRecord:
    return ResumeRecord(run_id=run_id, epoch=epoch, worker_id=worker_id, at=0.0, from_seq=0,
                        code_version="wf@1", reused=0)


@dataclasses.dataclass
class Pair:
    clock: stead.FakeClock
    a: stead.Store
    b: stead.Store


@pytest.fixture
async def pair(db_url: str) -> AsyncIterator[Pair]:
    """Two store objects (two connections) on one file, sharing a fake clock."""
    clock = stead.FakeClock()
    a = await stead.open_store(db_url, clock=clock, lease_clock=clock)
    b = await stead.open_store(db_url, clock=clock, lease_clock=clock)
    yield Pair(clock, a, b)
    await a.close()
    await b.close()


async def _new_run(store: stead.Store, run_id: str = "r1") -> None:
    await store.create_run(NewRun(run_id, "wf", 1, None, '{"args":[],"kwargs":{}}'))


# -- the store is the arbiter ---------------------------------------------------
async def test_an_expired_lease_is_claimed_with_the_next_epoch(pair: Pair) -> None:
    await _new_run(pair.a)
    [first] = await pair.a.claim("w1", ["wf@1"], LEASE, 1)
    assert await pair.b.claim("w2", ["wf@1"], LEASE, 1) == []  # the lease holds
    pair.clock.advance(LEASE)  # expiry is inclusive: lease_expires_at <= now
    [second] = await pair.b.claim("w2", ["wf@1"], LEASE, 1)
    assert (first.epoch, first.lease_owner) == (1, "w1")
    assert (second.epoch, second.lease_owner) == (2, "w2")
    assert await pair.a.renew([Fence("r1", 1, "w1")], LEASE) == [Fence("r1", 1, "w1")]
    await pair.a.release(Fence("r1", 1, "w1"))  # a no-op for the stale holder
    row = await pair.b.get_run("r1")
    assert (row.epoch, row.lease_owner) == (2, "w2")


async def test_a_stale_write_raises_and_writes_nothing_not_even_its_resume_record(
    pair: Pair,
) -> None:
    await _new_run(pair.a)
    await pair.a.claim("w1", ["wf@1"], LEASE, 1)
    await pair.a.append(Fence("r1", 1, "w1"), [_rec(0, 1)])
    pair.clock.advance(LEASE + 1)
    await pair.b.claim("w2", ["wf@1"], LEASE, 1)

    stale = Fence("r1", 1, "w1")
    with pytest.raises(stead.StaleLease):
        await pair.a.append(stale, [_rec(1, 1)], _resume("r1", 1, "w1"))
    with pytest.raises(stead.StaleLease):
        await pair.a.finish(stale, "completed", result="1", records=[_rec(1, 1)])
    assert [(r.seq, r.epoch) for r in await pair.b.load_journal("r1")] == [(0, 1)]
    assert await pair.b.list_resumes("r1") == []
    assert (await pair.b.get_run("r1")).status == "running"

    await pair.b.append(Fence("r1", 2, "w2"), [_rec(1, 2)], _resume("r1", 2, "w2"))
    journal = await pair.b.load_journal("r1")
    check_journal(journal)
    assert [(r.seq, r.epoch) for r in journal] == [(0, 1), (1, 2)]
    assert [r.epoch for r in await pair.b.list_resumes("r1")] == [2]


async def test_the_old_and_the_new_holder_write_at_once_only_the_new_one_lands(
    pair: Pair,
) -> None:
    await _new_run(pair.a)
    await pair.a.claim("w1", ["wf@1"], LEASE, 1)
    pair.clock.advance(LEASE + 1)
    await pair.b.claim("w2", ["wf@1"], LEASE, 1)
    for _ in range(3):  # both aim at the same next position, concurrently
        seq = len(await pair.b.load_journal("r1"))
        old, new = await asyncio.gather(
            pair.a.append(Fence("r1", 1, "w1"), [_rec(seq, 1, "old")]),
            pair.b.append(Fence("r1", 2, "w2"), [_rec(seq, 2, "new")]),
            return_exceptions=True,
        )
        assert isinstance(old, stead.StaleLease)
        assert new is None
    journal = await pair.b.load_journal("r1")
    check_journal(journal)
    assert [(r.name, r.epoch) for r in journal] == [("new", 2)] * 3


async def test_cancel_bumps_the_epoch_so_the_holders_next_write_fails(pair: Pair) -> None:
    await _new_run(pair.a)
    [row] = await pair.a.claim("w1", ["wf@1"], LEASE, 1)
    holder = Fence("r1", row.epoch, "w1")
    await pair.a.append(holder, [_rec(0, 1)])

    cancelled = await pair.b.cancel_run("r1")
    assert (cancelled.status, cancelled.epoch, cancelled.lease_owner) == ("cancelled", 2, None)
    with pytest.raises(stead.StaleLease):
        await pair.a.append(holder, [_rec(1, 1)])
    with pytest.raises(stead.StaleLease):
        await pair.a.finish(holder, "completed", result="1")
    assert await pair.a.renew([holder], LEASE) == [holder]
    await pair.a.release(holder)
    pair.clock.advance(LEASE + 1)
    assert await pair.b.claim("w2", ["wf@1"], LEASE, 10) == []  # nobody takes it up again
    row = await pair.b.get_run("r1")
    assert (row.status, row.epoch, row.result) == ("cancelled", 2, None)
    assert [r.seq for r in await pair.b.load_journal("r1")] == [0]


async def test_claims_racing_from_two_connections_never_share_a_run(pair: Pair) -> None:
    ids = [f"r{i:02}" for i in range(20)]
    for run_id in ids:
        await _new_run(pair.a, run_id)
    batches = await asyncio.gather(*(
        store.claim(f"w{i}", ["wf@1"], LEASE, 3)
        for i, store in enumerate([pair.a, pair.b] * 5)
    ))
    claimed = [(r.run_id, r.epoch) for batch in batches for r in batch]
    assert sorted(claimed) == [(run_id, 1) for run_id in ids]


# -- two Worker objects -----------------------------------------------------------
class Watched(DelegatingStore):
    """Counts claims and notes the outcome of every journal write a worker makes."""

    def __init__(self, inner: stead.Store) -> None:
        super().__init__(inner)
        self.writes: list[tuple[str, int, list[str]]] = []
        self.claims = 0

    async def claim(
        self, worker_id: str, hosted: Sequence[str], lease_seconds: float, limit: int,
        exclude: Sequence[str] = (),
    ) -> list[RunRow]:
        self.claims += 1
        return await self.inner.claim(worker_id, hosted, lease_seconds, limit, exclude)

    async def append(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None = None
    ) -> None:
        names = [r.name for r in records]
        try:
            await self.inner.append(fence, records, resume)
        except stead.StaleLease:
            self.writes.append(("stale", fence.epoch, names))
            raise
        self.writes.append(("ok", fence.epoch, names))


async def test_two_workers_race_for_one_run_and_exactly_one_advances_it(pair: Pair) -> None:
    app = stead.App("race")
    calls: list[str] = []
    entered = asyncio.Event()
    gate = asyncio.Event()

    async def one() -> int:
        calls.append("one")
        return 1

    async def slow(x: int) -> int:
        calls.append("slow")
        if len(calls) == 2:  # the first worker's call hangs until the test lets go
            entered.set()
            await gate.wait()
            return -1000
        return x + 1

    @app.workflow()
    async def wf(run: stead.Run) -> int:
        x = await run.step("one", one)
        y = await run.step("slow", slow, x)
        return await run.step("three", lambda v: v * 10, y)

    run_id = (await stead.Client(pair.b, app).start(wf)).run_id
    watched = Watched(pair.a)
    opts = stead.WorkerOptions(concurrency=1, lease_seconds=LEASE, poll_interval=0.01)
    first = stead.Worker(app, watched, dataclasses.replace(opts, worker_id="first"))
    first_task = asyncio.create_task(first.run())
    try:
        await asyncio.wait_for(entered.wait(), 10)
        pair.clock.advance(LEASE + 1)  # the first worker stalls past its lease...
        second = stead.Worker(app, pair.b, dataclasses.replace(opts, worker_id="second"))
        await second.run_until_idle()  # ...and the second takes the run over and ends it
        assert await stead.Client(pair.b).result(run_id, timeout=1) == 20
        settled = await pair.b.load_journal(run_id)

        gate.set()  # now the first worker's hung call returns and it tries to write
        await wait_until("the stale write", lambda: len(watched.writes) == 2, timeout=10)
    finally:
        first.stop()
        await asyncio.wait_for(first_task, 10)

    assert watched.writes == [("ok", 1, ["one"]), ("stale", 1, ["slow"])]
    assert await pair.b.load_journal(run_id) == settled
    check_journal(settled)
    assert [(r.name, r.epoch) for r in settled] == [("one", 1), ("slow", 2), ("three", 2)]
    assert calls == ["one", "slow", "slow"]  # the stale answer was never acknowledged
    row = await pair.b.get_run(run_id)
    assert (row.status, row.epoch, row.lease_owner) == ("completed", 2, None)
    [resume] = await pair.b.list_resumes(run_id)
    assert (resume.epoch, resume.worker_id, resume.reused) == (2, "second", 1)


async def test_a_worker_whose_lease_lapsed_does_not_take_over_its_own_run(pair: Pair) -> None:
    """A worker stalls past its lease while nobody else wants the run: it must
    not claim the run again (a second attempt beside the first), and the
    stalled attempt, still the holder, carries on at its epoch."""
    app = stead.App("race")
    entered = asyncio.Event()
    gate = asyncio.Event()
    calls = 0

    async def hang() -> int:
        nonlocal calls
        calls += 1
        entered.set()
        await gate.wait()
        return calls

    @app.workflow()
    async def wf(run: stead.Run) -> int:
        return await run.step("hang", hang)

    run_id = (await stead.Client(pair.a, app).start(wf)).run_id
    watched = Watched(pair.a)
    worker = stead.Worker(app, watched, stead.WorkerOptions(
        concurrency=2, lease_seconds=LEASE, poll_interval=0.01, worker_id="w",
    ))
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(entered.wait(), 10)
        pair.clock.advance(LEASE + 1)  # the lease lapses under the stalled attempt
        polled = watched.claims
        await wait_until("three more polls", lambda: watched.claims >= polled + 3, timeout=10)
        row = await pair.b.get_run(run_id)
        assert (row.epoch, row.lease_owner) == (1, "w")
        gate.set()
        assert await stead.Client(pair.b).result(run_id, timeout=10) == 1
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
    assert calls == 1
    assert [(r.name, r.epoch) for r in await pair.b.load_journal(run_id)] == [("hang", 1)]
    assert await pair.b.list_resumes(run_id) == []


# -- two worker processes -----------------------------------------------------------
@pytest.mark.slow
async def test_two_worker_processes_share_twenty_runs_and_every_step_runs_once(
    workers: Workers, store: stead.Store
) -> None:
    client = stead.Client(store)
    runs = {(await client.start("chain", k, version=1)).run_id: k for k in range(20)}
    procs = [
        workers.start("--lease", "5", "--concurrency", "4", "--until-done", "--wait-for-gate",
                      "--worker-id", name)
        for name in ("left", "right")
    ]
    await wait_until("both workers to be ready",
                     lambda: workers.saw("ready left") and workers.saw("ready right"))
    workers.open_gate()  # both start claiming at once
    for proc in procs:
        assert await workers.exit_code(proc) == 0, workers.output(proc)

    assert workers.steps() == {f"{run_id} {s}": 1 for run_id in runs for s in "abcd"}
    claims = workers.claims()
    assert len(claims) == len(set(claims)), "a run was claimed twice at one epoch"
    for run_id, k in runs.items():
        assert await client.result(run_id, timeout=1) == 2 * k + 7
        journal = await store.load_journal(run_id)
        check_journal(journal)
        # (a step's started marker rides along with a sibling's commit, or not)
        assert sorted(r.name for r in journal if r.status != "started") == [
            "a", "b", "c", "d"]
        claimed_at = {epoch for (rid, epoch) in claims if rid == run_id}
        takeovers = {r.epoch for r in await store.list_resumes(run_id)}
        assert claimed_at == {1} | takeovers
        epochs = {r.epoch for r in journal}
        if not takeovers:
            assert epochs == {1}, (run_id, journal)
        else:  # every record is from an epoch that held the run
            assert epochs <= claimed_at
