"""PostgreSQL under faults: server sessions terminated mid-run
(`pg_terminate_backend`), and a server that crashes and restarts during a run
(a private throwaway server, so no other test is disturbed). Runs complete,
nothing acknowledged is done twice, nothing is lost."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import pytest

import stead
from stead.records import NewRun
from stead.store.postgres import PostgresStore
from tests import pg, stress
from tests.workers.procs import wait_until


class Pipeline:
    """A workflow of steps (one of them in a gather) and an effect, counting
    every call in this process, so 'exactly once' can be checked exactly."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()
        self.gate = asyncio.Event()
        self.gate.set()
        self.app = stead.App("faults")

        def step(name: str, x: int) -> int:
            self.calls[name] += 1
            return x + 1

        async def gated(name: str, x: int) -> int:
            self.calls[name] += 1
            await self.gate.wait()
            return x

        def pay(op: stead.Operation, k: int) -> str:
            self.sent[str(k)] += 1
            return op.key

        @self.app.workflow()
        async def job(run: stead.Run, k: int) -> list[int]:
            a = await run.step("a", step, f"{k}a", k)
            b, c = await asyncio.gather(run.step("b", step, f"{k}b", a),
                                        run.step("c", gated, f"{k}c", a))
            await run.effect("pay", pay, k)
            return [a, b, c, await run.step("d", step, f"{k}d", b)]

    def expected(self, k: int) -> list[int]:
        return [k + 1, k + 2, k + 1, k + 3]

    def check_once(self, n: int) -> None:
        assert self.calls == {f"{k}{s}": 1 for k in range(n) for s in "abcd"}
        assert self.sent == {str(k): 1 for k in range(n)}


class Terminator:
    """Terminates every session of an app (`pg.terminate`) every few tens of
    milliseconds, scaled to the machine (see the storm below), until stopped;
    counts the sessions it ended."""

    def __init__(self, pg_url: str, seed: int) -> None:
        self.app_name = pg.query_param(pg_url, "application_name")
        self.rng = random.Random(seed)
        self.stop = asyncio.Event()
        self.killed = 0

    async def run(self) -> None:
        while not self.stop.is_set():
            await asyncio.sleep(self.rng.uniform(0.02, 0.1) * stress.slow())
            self.killed += await asyncio.to_thread(pg.terminate, self.app_name)


def _interrupted(caplog: pytest.LogCaptureFixture) -> bool:
    """Whether a store call was cut off and made again: retried on a new
    connection, or a group commit's writes made one by one (each read back
    first), as the store says in its warnings."""
    return any("retrying in" in r.getMessage() or "one by one" in r.getMessage()
               for r in caplog.records)


async def _check_journals(store: stead.Store, run_ids: list[str]) -> None:
    for run_id in run_ids:
        journal = await store.load_journal(run_id)
        assert [r.seq for r in journal] == list(range(len(journal)))
        positions = [(r.addr, r.attempt, r.status) for r in journal]
        assert len(positions) == len(set(positions))
        assert {r.epoch for r in journal} == {1}, "a run was taken over"


@pytest.mark.slow  # a storm: the full set, and twenty times in CI's stress pass
async def test_backends_terminated_mid_run_lose_and_repeat_nothing(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every session of the app is killed every few tens of milliseconds while
    two workers run 40 runs: each write is retried on a new connection, and a
    write whose COMMIT was cut off is read back, not redone.

    The pause between kills is scaled to the machine (tests/stress.py), as
    deadlines are: a box k times slower makes a connection and sends a write
    k times more slowly, so kills k times as frequent would leave it no
    write that gets through, and the retry bound (30 s, after which a run is
    rightly handed over and its unrecorded steps run again) would be what is
    tested instead of the retries."""
    N = 40
    p = Pipeline()
    stores = [await stead.open_store(pg_url) for _ in range(3)]
    reader = stores[0]
    terminator = Terminator(pg_url, seed=5)
    try:
        client = stead.Client(reader, p.app)
        run_ids = [(await client.start("job", k)).run_id for k in range(N)]
        chaos = asyncio.create_task(terminator.run())
        workers = [
            stead.Worker(p.app, s, stead.WorkerOptions(concurrency=4, poll_interval=0.05))
            for s in stores[1:]
        ]
        tasks = [asyncio.create_task(w.run()) for w in workers]
        try:
            for k, run_id in enumerate(run_ids):
                assert await client.result(run_id, timeout=60) == p.expected(k)
        finally:
            terminator.stop.set()
            await chaos
            for w in workers:
                w.stop()
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
        assert terminator.killed >= 10, \
            f"only {terminator.killed} sessions were terminated: the test proved little"
        p.check_once(N)
        await _check_journals(reader, run_ids)
        assert _interrupted(caplog), "no store call was interrupted: the test proved little"
    finally:
        for s in stores:
            await s.close()


@pytest.mark.slow  # a storm, as above
async def test_deliveries_with_their_sessions_terminated_each_land_once(
        pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A wait's opening, a suspension and a delivery each go in one pipeline
    (BEGIN with its first statement, COMMIT with its last): with every session
    of the app killed every few tens of milliseconds while 40 runs open their
    waits, sleep and are woken, each run waits once, each delivery is
    answered as accepted once, stored once, and wakes its run once; a write
    whose COMMIT was cut off is read back, not made again (a delivery tried
    again would find its own event and answer that it was a duplicate)."""
    N = 40
    woke: Counter[str] = Counter()
    app = stead.App("deliveries_under_kills")

    def after(run_id: str) -> str:
        woke[run_id] += 1
        return run_id

    @app.workflow()
    async def approval(run: stead.Run) -> str:
        event = await (await run.wait("approval", token=False))
        await run.step("after", after, run.id)
        return str(event)

    stores = [await stead.open_store(pg_url) for _ in range(2)]
    reader, working = stores
    client = stead.Client(reader, app)
    terminator = Terminator(pg_url, seed=7)
    try:
        run_ids = [(await client.start(approval)).run_id for _ in range(N)]
        worker = stead.Worker(app, working, stead.WorkerOptions(concurrency=8,
                                                                poll_interval=0.05))
        chaos = asyncio.create_task(terminator.run())
        task = asyncio.create_task(worker.run())
        try:
            async def all_waiting() -> bool:
                return len(await reader.list_runs(status="waiting", limit=N + 1)) == N

            await wait_until("every run to wait", all_waiting, timeout=60)
            verdicts = [await client.deliver(r, event_id=f"e-{r}", kind="approval",
                                             payload={"n": i})
                        for i, r in enumerate(run_ids)]
            for run_id in run_ids:
                await client.result(run_id, timeout=60)
        finally:
            terminator.stop.set()
            await chaos
            worker.stop()
            await asyncio.wait_for(task, 30)
        assert terminator.killed >= 10, \
            f"only {terminator.killed} sessions were terminated: the test proved little"
        assert all(isinstance(v, stead.Accepted) for v in verdicts), verdicts
        assert woke == {r: 1 for r in run_ids}
        for i, run_id in enumerate(run_ids):
            assert len(await reader.list_waits(run_id=run_id)) == 1
            events = await reader.list_events(run_id)
            assert [(e.event_id, e.verdict) for e in events] == [(f"e-{run_id}", "accepted")]
            assert await client.result(run_id, timeout=5) == str({"n": i})
        assert _interrupted(caplog), "no store call was interrupted: the test proved little"
    finally:
        for s in stores:
            await s.close()


# -- a private server that crashes and restarts ---------------------------------------
@pytest.fixture(scope="module")
def server() -> Iterator[pg.PrivateServer]:
    pg.require()
    s = pg.PrivateServer()
    s.start()
    try:
        yield s
    finally:
        s.destroy()


@pytest.fixture
async def private_url(server: pg.PrivateServer) -> AsyncIterator[str]:
    yield pg.with_query(server.url, schema=f"t_{random.randrange(10**9)}")


async def test_a_server_crash_and_restart_during_a_run_loses_and_repeats_nothing(
    server: pg.PrivateServer, private_url: str
) -> None:
    p = Pipeline()
    p.gate.clear()
    store = await stead.open_store(private_url)
    reader = await stead.open_store(private_url)
    try:
        client = stead.Client(reader, p.app)
        run_ids = [(await client.start("job", k)).run_id for k in range(3)]
        worker = stead.Worker(p.app, store, stead.WorkerOptions(poll_interval=0.05))
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 20
        while sum(p.calls[f"{k}c"] for k in range(3)) < 3:  # all three are mid-run
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        await asyncio.to_thread(server.stop, "immediate")  # a crash: no clean shutdown
        p.gate.set()  # the runs go on writing into a dead server...
        await asyncio.sleep(0.5)
        await asyncio.to_thread(server.start)  # ...which comes back (crash recovery)
        try:
            for k, run_id in enumerate(run_ids):
                assert await client.result(run_id, timeout=60) == p.expected(k)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
        p.check_once(3)
        await _check_journals(reader, run_ids)
    finally:
        await store.close()
        await reader.close()


async def test_a_server_down_longer_than_the_retry_bound_is_store_unavailable(
    server: pg.PrivateServer, private_url: str
) -> None:
    store = PostgresStore(private_url, clock=stead.SystemClock(), retry_for=1.0)
    await store.open()
    try:
        await store.create_run(NewRun("r1", "wf", 1, None, "{}"))
        await asyncio.to_thread(server.stop, "fast")
        try:
            started = time.monotonic()
            with pytest.raises(stead.StoreUnavailable, match="unreachable for 1 s"):
                await store.get_run("r1")
            with pytest.raises(stead.StoreUnavailable):
                await store.create_run(NewRun("r2", "wf", 1, None, "{}"))
            assert time.monotonic() - started < 20
        finally:
            await asyncio.to_thread(server.start)
        # The same store object works again once the server is back.
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(stead.StoreUnavailable):
                assert (await store.get_run("r1")).status == "pending"
                break
            assert time.monotonic() < deadline, "the store did not recover"
        assert [r.run_id for r in await store.list_runs()] == ["r1"]  # r2 was never written
    finally:
        await store.close()


async def test_a_column_a_newer_release_adds_under_a_running_process_fails_nothing(
    pg_url: str,
) -> None:
    """A rolling deploy: a newer release's migration adds a column to runs
    while this process holds statements it prepared reading runs with `*`.
    The server refuses those ("cached plan must not change result type");
    the store drops the connection and its statements and reads again."""
    store = await stead.open_store(pg_url)
    try:
        client = stead.Client(store)
        run_id = (await client.start("w", version=1)).run_id
        for _ in range(12):  # past psycopg's prepare threshold, on each pooled connection
            await store.get_run(run_id)
            await store.list_runs()
        import psycopg
        from psycopg import sql

        with psycopg.connect(pg.URL, autocommit=True) as admin:
            admin.execute(sql.SQL("ALTER TABLE {}.runs ADD COLUMN from_a_newer_release TEXT")
                          .format(sql.Identifier(pg.query_param(pg_url, "schema"))))
        for _ in range(3):
            assert (await store.get_run(run_id)).run_id == run_id
            assert [r.run_id for r in await store.list_runs()] == [run_id]
        [row] = await store.claim("w1", ["w@1"], 30.0, 1, exclude=[])
        assert row.run_id == run_id
    finally:
        await store.close()
