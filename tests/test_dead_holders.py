"""A worker SIGKILLed mid-run: the next worker takes its run within about a
second (a claimer on the same machine sees the holder's process is gone),
not after the 30 s default lease. Real processes, on both stores."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import pytest

import stead
from stead import processes
from stead.records import Fence, Liveness
from tests.ops_app import cli
from tests.workers.procs import SLOW, Workers, check_journal, wait_until

# The promise: takeover within 2 s of a SIGKILL, with the default lease.
TAKEOVER = 2.0


@pytest.fixture
async def store(workers: Workers) -> AsyncIterator[stead.Store]:
    s = await stead.open_store(workers.db_url)
    yield s
    await s.close()


async def _two_worker_processes(store: stead.Store) -> bool:
    return len({h.worker_id for h in await store.worker_hosts()}) == 2


@pytest.mark.slow
async def test_a_killed_workers_run_is_taken_over_within_two_seconds(
    workers: Workers, store: stead.Store
) -> None:
    run_id = (await stead.Client(store).start("slow", version=1)).run_id
    doomed = workers.start("--lease", "30", "--worker-id", "doomed")
    await wait_until("the gated step to start", lambda: workers.step_names(run_id)["gated"] == 1)
    workers.start("--lease", "30", "--worker-id", "heir")
    await wait_until("the second worker to start", lambda: _two_worker_processes(store))
    assert (await store.get_run(run_id)).lease_owner == "doomed"

    doomed.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    workers.open_gate()

    async def taken() -> bool:  # by epoch: the heir may finish the run at once
        return (await store.get_run(run_id)).epoch >= 2

    await wait_until("the heir to take the run", taken, timeout=30 * SLOW)
    took = time.monotonic() - killed
    assert took < TAKEOVER * SLOW, f"took {took:.1f} s"
    assert await stead.Client(store).result(run_id, timeout=30 * SLOW) == [
        "first", "gated", "last"]
    check_journal(await store.load_journal(run_id))
    # Fencing stays: the dead holder's epoch no longer holds the run.
    stale = Fence(run_id, 1, "doomed")
    assert await store.renew([stale], 30) == [stale]


async def _recorded(store: stead.Store, *worker_ids: str) -> bool:
    """Whether each of `worker_ids` recorded its process, alive."""
    judged = {w.worker_id: w.verdict for w in await store.worker_liveness()}
    return all(judged.get(w) == Liveness.ALIVE for w in worker_ids)


@pytest.mark.slow
async def test_doctor_says_a_sigkilled_worker_is_dead_by_the_claimers_test(
    workers: Workers, store: stead.Store
) -> None:
    procs = {w: workers.start("--lease", "30", "--worker-id", w) for w in ("one", "two")}
    await wait_until("both workers to start", lambda: _recorded(store, "one", "two"))
    # Heard from too: a worker's first heartbeat follows its lease keeper's
    # first look for dead holders.
    await wait_until("both workers to claim", lambda: _two_worker_processes(store))
    run_id = (await stead.Client(store).start("slow", version=1)).run_id
    await wait_until("a worker to take the run",
                     lambda: workers.step_names(run_id)["gated"] == 1)
    dead = (await store.get_run(run_id)).lease_owner
    assert dead is not None
    [alive] = set(procs) - {dead}
    procs[dead].send_signal(signal.SIGKILL)
    procs[dead].wait()
    # Judged at once by the claimers' test (its process, on this machine),
    # before or after the other worker ended its leases and forgot its process.
    judged = {w.worker_id: w for w in await store.worker_liveness()}
    assert judged[dead].verdict == Liveness.DEAD, judged
    assert judged[alive].verdict == Liveness.ALIVE, judged
    shown = await asyncio.to_thread(cli, workers.db_url, "doctor")
    assert "workers heard from in the last 60s: 2 (1 alive, 1 dead)" in shown.output, (
        shown.output)
    lines = {line.split(":")[0].strip(): line for line in shown.output.splitlines()
             if line.startswith("  ")}
    assert "[dead: " in lines[dead] and "its leases end at the next claim" in lines[dead]
    assert f"[alive: its process {procs[alive].pid} on this machine runs]" in lines[alive]
    workers.open_gate()
    assert await stead.Client(store).result(run_id, timeout=30 * SLOW) == [
        "first", "gated", "last"]


def test_a_process_is_dead_only_when_this_machine_can_tell() -> None:
    me = processes.this_process()
    assert not processes.dead(me)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = processes.Process(me.machine, child.pid, "")
        assert not processes.dead(started)
        # Another machine's process, or an unknown pid, is never judged.
        assert not processes.dead(dataclasses.replace(started, machine="elsewhere"))
        child.kill()
        child.wait()
        assert processes.dead(started)
        assert not processes.dead(dataclasses.replace(started, machine="elsewhere"))
    finally:
        child.kill()
        child.wait()
    # The pid now belongs to a process started at another time: that one died.
    assert processes.dead(dataclasses.replace(me, started="1"))


async def _leased_to(store: stead.Store, owner: str) -> str:
    run_id = (await stead.Client(store).start("w", version=1)).run_id
    [row] = await store.claim(owner, ["w@1"], 30.0, 1, exclude=[])
    assert row.run_id == run_id
    return run_id


async def test_only_the_leases_of_dead_holders_end_early(
    store: stead.Store, db_url: str
) -> None:
    dead_run = await _leased_to(store, "dead")
    alive_run = await _leased_to(store, "alive")
    unknown_run = await _leased_to(store, "unrecorded")
    await store.record_process("alive")  # this process, alive
    _recorded_by_a_process_that_ended(db_url, "dead", stead.SystemClock().now())

    # What doctor says of them, by the same test.
    assert {w.worker_id: w.verdict for w in await store.worker_liveness()} == {
        "dead": Liveness.DEAD, "alive": Liveness.ALIVE}
    assert await store.end_dead_leases("claimer") == ["dead"]
    taken = await store.claim("claimer", ["w@1"], 30.0, 10, exclude=[])
    assert [r.run_id for r in taken] == [dead_run]
    for run_id, owner in ((alive_run, "alive"), (unknown_run, "unrecorded")):
        assert (await store.get_run(run_id)).lease_owner == owner
    assert await store.end_dead_leases("claimer") == []
    # The old holder is fenced off: its epoch lost the run.
    assert await store.renew([Fence(dead_run, 1, "dead")], 30.0) == [Fence(dead_run, 1, "dead")]


async def test_a_worker_started_after_a_holder_died_takes_its_run_at_its_first_claim(
    store: stead.Store, db_url: str
) -> None:
    """The lease keeper ends the dead holders' leases before the worker's
    first claim: that claim takes the run, not one after a wake-up."""
    from stead.worker.leases import LeaseKeeper

    dead_run = await _leased_to(store, "dead")
    _recorded_by_a_process_that_ended(db_url, "dead", stead.SystemClock().now())
    keeper = LeaseKeeper(store, 30.0, on_lost=lambda fences: None, worker_id="heir",
                         on_freed=lambda: None)
    await keeper.start()
    try:
        # No sleep, no second look: the keeper's start has ended the lease.
        taken = await store.claim("heir", ["w@1"], 30.0, 10, exclude=[])
        assert [r.run_id for r in taken] == [dead_run]
        assert taken[0].epoch == 2
    finally:
        await keeper.stop()


async def test_on_postgres_a_holder_is_dead_once_its_presence_lock_is_free(
    store: stead.Store, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not db_url.startswith("postgres"):
        pytest.skip("presence locks are PostgreSQL's")
    # As if the holder ran on another machine: its process cannot be judged,
    # so its presence lock decides.
    monkeypatch.setattr(processes, "dead", lambda process: False)
    monkeypatch.setattr(processes, "this_process",
                        lambda: processes.Process("another machine", 1, ""))
    run_id = await _leased_to(store, "remote")
    script = (
        "import asyncio, sys, stead\n"
        "async def main():\n"
        f"    s = await stead.open_store({db_url!r})\n"
        "    await s.record_process('remote')\n"
        "    await s.keep_presence('remote')\n"
        "    print('held', flush=True)\n"
        "    sys.stdin.readline()\n"
        "asyncio.run(main())\n")
    with subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE) as holder:
        assert holder.stdout is not None
        try:
            assert holder.stdout.readline().strip() == b"held"
            assert await store.end_dead_leases("claimer") == []
            [remote] = await store.worker_liveness()  # what doctor says, by the same test
            assert (remote.verdict, remote.reason) == (
                Liveness.ALIVE, "on another machine; it holds its presence lock")
        finally:
            holder.kill()
            holder.wait()

    async def gone() -> bool:
        return [(w.worker_id, w.verdict) for w in await store.worker_liveness()] == [
            ("remote", Liveness.DEAD)]

    await wait_until("doctor's test to find the lock free", gone, timeout=10 * SLOW)

    async def freed() -> bool:  # the server notices the session ended
        return await store.end_dead_leases("claimer") == ["remote"]

    await wait_until("the holder's lock to be free", freed, timeout=10 * SLOW)
    [row] = await store.claim("claimer", ["w@1"], 30.0, 1, exclude=[])
    assert (row.run_id, row.epoch) == (run_id, 2)


def _recorded_by_a_process_that_ended(db_url: str, worker_id: str, at: float) -> None:
    """A process records itself as `worker_id` (at business time `at`), then ends."""
    subprocess.run([sys.executable, "-c", (
        "import asyncio, stead\n"
        "async def main():\n"
        f"    s = await stead.open_store({db_url!r}, clock=stead.FakeClock({at!r}))\n"
        f"    await s.record_process({worker_id!r})\n"
        "    await s.close()\n"
        "asyncio.run(main())\n")], check=True, timeout=60 * SLOW)


async def test_a_process_row_is_dropped_once_no_heartbeat_names_its_worker(
    fstore: stead.Store, clock: stead.FakeClock, db_url: str
) -> None:
    day = 24 * 3600.0
    _recorded_by_a_process_that_ended(db_url, "forgotten", clock.now())
    clock.advance(2 * day)
    _recorded_by_a_process_that_ended(db_url, "recent", clock.now())
    for owner in ("forgotten", "recent"):
        await _leased_to(fstore, owner)
    await fstore.record_process("newcomer")  # drops the rows a day stale
    # Both holders are dead; only the one whose row is left can be told so.
    assert await fstore.end_dead_leases("claimer") == ["recent"]
