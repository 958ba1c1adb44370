"""The rules that tell a dead lease holder from a live one whose connection
dropped (store/_holders.py), and what a worker does while it cannot be sure
it still holds its leases (stead/worker/standing.py). The same promises with
real processes and real connections: tests/test_liveness_processes.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stead
from stead import processes
from stead.store._holders import Absences, Holder
from stead.worker.standing import Standing
from tests import pg, stress
from tests.workers.procs import SLOW, wait_until

GRACE = 1.25
_ME = processes.Process("elsewhere", 1, "")


def _holder(lock_free: bool, taken: int, worker_id: str = "w") -> Holder:
    return Holder(worker_id, _ME, lock_free, taken)


# -- Absences: free, untaken, for the whole grace -------------------------------------
Look = tuple[float, bool, int]  # seconds since the last look, lock free?, takes so far


@settings(max_examples=stress.examples(300), deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1.0), st.booleans(), st.integers(0, 3)),
                min_size=1, max_size=30))
def test_a_holder_is_absent_only_after_a_grace_free_and_untaken(looks: list[Look]) -> None:
    """Model: the holder is absent at a look iff every look since some look at
    least GRACE ago found the lock free under the count seen now, and so did
    every look between."""
    absences = Absences()
    now = 0.0
    seen: list[tuple[float, bool, int]] = []
    for gap, free, taken in looks:
        now += gap
        seen.append((now, free, taken))
        found = absences.absent([_holder(free, taken)], now, GRACE)
        # The watch starts at the first look of the latest free, same-count streak.
        start = None
        for at, was_free, was_taken in reversed(seen):
            if not was_free or was_taken != taken:
                break
            start = at
        expected = free and start is not None and now - start >= GRACE
        assert (found != []) == expected, seen


def test_the_watch_ends_for_holders_no_longer_listed() -> None:
    absences = Absences()
    absences.absent([_holder(True, 1, "a"), _holder(True, 1, "b")], 0.0, GRACE)
    assert absences.next_due(GRACE) == GRACE
    absences.absent([_holder(True, 1, "b")], 1.0, GRACE)  # a's leases ended, or it came back
    assert [h.worker_id for h in absences.absent([_holder(True, 1, "a")], 2.0, GRACE)] == []
    assert absences.next_due(GRACE) == 2.0 + GRACE
    absences.absent([], 3.0, GRACE)
    assert absences.next_due(GRACE) is None


# -- Standing: no new call while the worker is not sure --------------------------------
async def test_in_a_larger_fleet_each_worker_looks_for_dead_holders_less_often(
        sqlite_url: str) -> None:
    from stead.worker import leases

    store = await stead.open_store(sqlite_url)
    try:
        def looks(peers: int) -> list[float]:
            keeper = leases.LeaseKeeper(store, 30.0, on_lost=lambda _: None,
                                        fleet=lambda: peers)
            return [keeper._next_look() for _ in range(2000)]

        # A small fleet: every worker looks every quarter second, as ever.
        for peers in (0, 1, 3):
            assert set(looks(peers)) == {0.25}
        assert leases.LeaseKeeper(store, 30.0, on_lost=lambda _: None)._next_look() == 0.25
        # A hundred workers: each looks about every 100/16 s, at a random point
        # of that interval, so the fleet still looks about 16 times a second.
        found = looks(99)
        every = 100 / 16
        assert all(0.5 * every <= t <= 1.5 * every for t in found)
        assert len(set(found)) > 1000  # spread, not in step
        assert 14 < 100 / (sum(found) / len(found)) < 18
    finally:
        await store.close()


async def test_a_worker_is_sure_of_its_leases_only_while_present_and_renewed() -> None:
    standing = Standing(lease_seconds=3.0)
    standing.bind(asyncio.get_running_loop())
    assert standing.sure()
    standing.absent()
    assert not standing.sure()
    standing.present()
    assert standing.sure()
    standing.renewed(time.monotonic() - 2.6)  # 2.6 s ago: past 5/6 of a 3 s lease
    assert not standing.sure()
    standing.renewed(time.monotonic())
    assert standing.sure()


async def test_a_run_waits_until_the_worker_is_sure_again_and_makes_no_task() -> None:
    """A run's code awaits `regained`: a task made there would be numbered as
    one of the run's branches, and its replay would not match."""
    loop = asyncio.get_running_loop()
    standing = Standing(lease_seconds=30.0)
    standing.bind(loop)
    standing.absent()
    tasks = set(asyncio.all_tasks())
    made: list[asyncio.Task[object]] = []
    factory = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: object, **kw: object) -> object:
        task = asyncio.Task(coro, loop=loop, **kw)  # type: ignore[arg-type]
        made.append(task)
        return task

    waiter = asyncio.ensure_future(standing.regained())
    loop.set_task_factory(counting)  # type: ignore[arg-type]
    try:
        await asyncio.sleep(0.35)  # a few of its looks
        assert not waiter.done()
        loop.call_later(0.05, standing.present)
        await asyncio.wait_for(asyncio.shield(waiter), 5)
    finally:
        loop.set_task_factory(factory)
    assert made == []
    assert set(asyncio.all_tasks()) <= tasks | {asyncio.current_task()}


# -- the store's judgement, with a real holder process ------------------------------
_HOLDER = (
    "import asyncio, sys, stead\n"
    "async def main():\n"
    "    s = await stead.open_store(sys.argv[1])\n"
    "    await s.record_process(sys.argv[2])\n"
    "    print(await s.keep_presence(sys.argv[2]), flush=True)\n"
    "    for line in sys.stdin:\n"
    "        print(await s.keep_presence(sys.argv[2]), flush=True)\n"
    "asyncio.run(main())\n")


class _Holder:
    """A process that holds a presence lock, and takes it again when asked."""

    def __init__(self, url: str, worker_id: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _HOLDER, url, worker_id],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.said() == "taken"

    def said(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().decode().strip()

    def keep(self) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"keep\n")
        self.proc.stdin.flush()
        return self.said()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


async def _leased_to(store: stead.Store, owner: str) -> str:
    run_id = (await stead.Client(store).start("w", version=1)).run_id
    [row] = await store.claim(owner, ["w@1"], 30.0, 1, exclude=[])
    assert row.run_id == run_id
    return run_id


def _terminate_presence(schema_app: str) -> int:
    rows = pg.admin(
        "SELECT count(pg_terminate_backend(a.pid)) FROM pg_stat_activity AS a "
        "JOIN pg_locks AS l ON l.pid = a.pid WHERE a.application_name = %s "
        "AND l.locktype = 'advisory' AND l.granted AND l.classid = 1937007980", schema_app)
    return int(str(rows[0][0]))


@pytest.fixture
def elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process judges as if the holders ran on another machine: only
    their presence lock (and their lease) can speak."""
    monkeypatch.setattr(processes, "this_process",
                        lambda: processes.Process("another machine", 1, ""))


async def test_a_holder_whose_presence_drops_and_is_taken_back_keeps_its_leases(
    pstore: stead.Store, pg_url: str, elsewhere: None
) -> None:
    run_id = await _leased_to(pstore, "remote")
    holder = _Holder(pg_url, "remote")
    try:
        app = pg.query_param(pg_url, "application_name")
        deadline = time.monotonic() + 4 * GRACE
        cuts = 0
        while time.monotonic() < deadline:  # cut, look, take back: again and again
            cuts += _terminate_presence(app)
            assert await pstore.end_dead_leases("claimer") == []
            await asyncio.sleep(GRACE / 3)
            assert await pstore.end_dead_leases("claimer") == []
            assert holder.keep() == "taken"
        assert cuts >= 3
        row = await pstore.get_run(run_id)
        assert (row.lease_owner, row.epoch) == ("remote", 1)
    finally:
        holder.kill()


async def test_a_holder_cut_off_past_the_grace_is_dead_and_may_come_back(
    pstore: stead.Store, pg_url: str, elsewhere: None
) -> None:
    run_id = await _leased_to(pstore, "remote")
    before = (await pstore.get_run(run_id)).lease_expires_at
    holder = _Holder(pg_url, "remote")
    try:
        assert _terminate_presence(pg.query_param(pg_url, "application_name")) == 1
        started = time.monotonic()

        async def ended() -> bool:
            return await pstore.end_dead_leases("claimer") == ["remote"]

        await wait_until("the holder to be taken for dead", ended, timeout=10 * SLOW)
        assert time.monotonic() - started >= GRACE
        row = await pstore.get_run(run_id)
        assert row.lease_expires_at is not None and row.lease_expires_at < before
        # Its lease ended now; the next claim reads when it would have run out.
        [taken] = await pstore.claim("claimer", ["w@1"], 30.0, 1, exclude=[])
        assert (taken.run_id, taken.epoch, taken.prior_lease_until) == (run_id, 2, before)

        # It was alive: it takes its lock back, and holds another run.
        assert holder.keep() == "taken"
        second = await _leased_to(pstore, "remote")
        assert await pstore.end_dead_leases("claimer") == []
    finally:
        holder.kill()  # now it dies for real: seen at once, its row was kept

    async def freed() -> bool:
        return await pstore.end_dead_leases("claimer") == ["remote"]

    started = time.monotonic()
    await wait_until("the dead holder's second run to be freed", freed, timeout=10 * SLOW)
    assert time.monotonic() - started < 3 * GRACE * SLOW
    [row] = await pstore.claim("claimer", ["w@1"], 30.0, 1, exclude=[])
    assert row.run_id == second


async def test_a_live_holder_on_this_machine_is_judged_by_its_process_alone(
    pstore: stead.Store, pg_url: str
) -> None:
    """Its presence lock stays free (its connection cut, not taken back),
    but its process lives: it keeps its leases however long that lasts."""
    run_id = await _leased_to(pstore, "local")
    holder = _Holder(pg_url, "local")
    try:
        assert _terminate_presence(pg.query_param(pg_url, "application_name")) == 1
        deadline = time.monotonic() + 3 * GRACE
        while time.monotonic() < deadline:
            assert await pstore.end_dead_leases("claimer") == []
            await asyncio.sleep(0.1)
        assert (await pstore.get_run(run_id)).lease_owner == "local"
    finally:
        holder.kill()
    assert await pstore.end_dead_leases("claimer") == ["local"]  # now it is gone


async def test_a_holder_gone_on_this_machine_leaves_nothing_to_wait_for(
    store: stead.Store, db_url: str
) -> None:
    """A process that ended is final: its leases end with no prior lease
    kept (no one can still be sending), and its process row goes."""
    run_id = await _leased_to(store, "gone")
    subprocess.run([sys.executable, "-c", (
        "import asyncio, stead\n"
        "async def main():\n"
        f"    s = await stead.open_store({db_url!r})\n"
        "    await s.record_process('gone')\n"
        "    await s.close()\n"
        "asyncio.run(main())\n")], check=True, timeout=60 * SLOW)
    assert await store.end_dead_leases("claimer") == ["gone"]
    [row] = await store.claim("claimer", ["w@1"], 30.0, 1, exclude=[])
    assert (row.run_id, row.prior_lease_until) == (run_id, None)
    assert await store.end_dead_leases("claimer") == []


async def test_a_worker_whose_first_twin_could_not_connect_keeps_its_presence(
    pstore: stead.Store, pg_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The keeper's own connection (its twin) could not be made at first, so
    the worker took its presence lock on its own store. When the twin connects
    later, the lock stays where it is held: taken on the twin it would be
    found held by that other session, and the worker would stop its runs as
    absent for good."""
    from stead.worker import leases

    real_open = leases.open_store
    refused: list[str] = []

    async def first_refused(url: str, **kw: Any) -> stead.Store:
        if not refused:
            refused.append(url)
            raise stead.errors.StoreUnavailable("no connection within the test's patience")
        return await real_open(url, **kw)

    monkeypatch.setattr(leases, "open_store", first_refused)
    app = stead.App("presence-kept")
    sure: list[bool] = []

    @app.workflow(version=1)
    async def wf(run: stead.Run) -> int:
        total = 0
        for i in range(12):  # a run that outlives several looks at the lock
            await run.sleep(0.1)
            total += await run.step(f"s{i}", lambda i=i: i)
        return total

    worker = stead.Worker(app, pstore, stead.WorkerOptions(lease_seconds=1.5, poll_interval=0.01))
    task = asyncio.create_task(worker.run())
    try:
        run_id = (await stead.Client(pstore, app).start(wf)).run_id
        assert await stead.Client(pstore, app).result(run_id, timeout=30) == sum(range(12))
        sure.append(worker._leases.standing.sure())
        locks = _presence_sessions(pg.query_param(pg_url, "application_name"))
    finally:
        worker.stop()
        await task
    assert refused, "the twin's first connection was not refused"
    assert sure == [True]
    assert locks == 1  # one session holds it: no second one waits on it


async def test_a_worker_run_again_holds_one_presence_lock_and_leaves_none(
    pstore: stead.Store, pg_url: str,
) -> None:
    """A worker run until idle, then again (its lease keeper ended and started
    anew), takes its lock on the new keeper's connection, and each time it
    stops no session is left holding it (nor open to hold it later)."""
    app = stead.App("presence-again")

    @app.workflow(version=1)
    async def wf(run: stead.Run) -> int:
        return await run.step("one", lambda: 1)

    client = stead.Client(pstore, app)
    worker = stead.Worker(app, pstore, stead.WorkerOptions(poll_interval=0.01))
    name = pg.query_param(pg_url, "application_name")
    for _ in range(3):
        run_id = (await client.start(wf)).run_id
        await worker.run_until_idle()
        assert (await client.get(run_id)).status == "completed"
        assert _presence_sessions(name) == 0


def _presence_sessions(schema_app: str) -> int:
    rows = pg.admin(
        "SELECT count(*) FROM pg_stat_activity AS a JOIN pg_locks AS l ON l.pid = a.pid "
        "WHERE a.application_name = %s AND l.locktype = 'advisory' AND l.granted "
        "AND l.classid = 1937007980", schema_app)
    return int(str(rows[0][0]))
