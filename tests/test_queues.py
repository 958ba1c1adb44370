"""Queues in one process, on both stores: what a claim of a queue takes
(limits, priority order, due sleepers, nothing of another queue), dedup keys,
and the checks at start. tests/test_queue_processes.py holds the limits
against three worker processes."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

import stead
from stead import queues

app = stead.App("queues")
LIMITED = app.queue("limited", concurrency=3, per_worker=2)
RATED = app.queue("rated", rate=(3, "10s"))
URGENT = app.queue("urgent", priority=True)
PLAIN = app.queue("plain")


@app.workflow()
async def job(run: stead.Run, n: int) -> int:
    return await run.step("double", lambda: 2 * n)


@app.workflow()
async def napper(run: stead.Run) -> str:
    await run.sleep(dt.timedelta(seconds=5))
    return "rested"


HOSTED = app.hosted()


async def start(client: stead.Client, queue: str, count: int, **options: object) -> list[str]:
    return [(await client.start(job, i, queue=queue, **options)).run_id  # type: ignore[arg-type]
            for i in range(count)]


# -- the rule of room --------------------------------------------------------------
@given(
    concurrency=st.none() | st.integers(1, 20), per_worker=st.none() | st.integers(1, 20),
    rate=st.none() | st.integers(1, 20), active=st.integers(0, 25), mine=st.integers(0, 25),
    recent=st.integers(0, 25), limit=st.integers(0, 25),
)
def test_room_never_passes_a_limit(concurrency: int | None, per_worker: int | None,
                                   rate: int | None, active: int, mine: int, recent: int,
                                   limit: int) -> None:
    q = queues.define("q", concurrency=concurrency, per_worker=per_worker,
                      rate=None if rate is None else (rate, 60))
    room = q.room(active, mine, recent, limit)
    assert 0 <= room <= limit
    if concurrency is not None:
        assert active + room <= max(concurrency, active)
    if per_worker is not None:
        assert mine + room <= max(per_worker, mine)
    if rate is not None:
        assert recent + room <= max(rate, recent)
    if all(x is None for x in (concurrency, per_worker, rate)):
        assert room == limit  # no limit: the worker's free slots


@pytest.mark.parametrize(("text", "seconds"), [
    ("1m", 60.0), ("30s", 30.0), ("2h", 7200.0), ("1d", 86400.0), ("250ms", 0.25),
    (dt.timedelta(minutes=2), 120.0), (5, 5.0), (0.5, 0.5),
])
def test_periods(text: queues.Period, seconds: float) -> None:
    assert queues.parse_period(text) == seconds


@pytest.mark.parametrize("bad", ["", "1 minute", "0s", -1, 0, True, "m", None])
def test_bad_periods_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="period"):
        queues.parse_period(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("options", [
    {"concurrency": 0}, {"per_worker": -1}, {"concurrency": 1.5}, {"rate": (0, "1m")},
    {"rate": 100}, {"rate": (10, "soon")}, {"per_worker": True},
])
def test_bad_limits_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"queue 'q'|period"):
        stead.App("x").queue("q", **options)  # type: ignore[arg-type]


def test_a_queue_is_declared_once() -> None:
    a = stead.App("x")
    a.queue("q")
    with pytest.raises(ValueError, match="twice"):
        a.queue("q", concurrency=2)
    with pytest.raises(ValueError, match="identifier"):
        a.queue("no spaces")


# -- starting in a queue ---------------------------------------------------------------
async def test_start_checks_the_queue_options(store: stead.Store) -> None:
    client = stead.Client(store, app)
    with pytest.raises(stead.UnknownQueue, match=r"declares no queue 'nope'.*limited"):
        await client.start(job, 1, queue="nope")
    with pytest.raises(stead.InvalidInput, match="takes no priorities"):
        await client.start(job, 1, queue="limited", priority=2)
    with pytest.raises(stead.InvalidInput, match="need a queue"):
        await client.start(job, 1, dedup_key="k")
    with pytest.raises(stead.InvalidInput, match="need a queue"):
        await client.start(job, 1, priority=1)
    with pytest.raises(stead.InvalidInput, match="integer"):
        await client.start(job, 1, queue="urgent", priority="high")  # type: ignore[arg-type]
    with pytest.raises(stead.InvalidInput, match="non-empty"):
        await client.start(job, 1, queue="urgent", dedup_key=" ")
    with pytest.raises(stead.InvalidInput, match="identifier-like"):
        await stead.Client(store).start("job", 1, version=1, queue="\x1b[2J")
    assert await store.list_runs() == []  # nothing was stored


async def test_a_dedup_key_returns_the_live_run_of_its_queue(store: stead.Store) -> None:
    client = stead.Client(store, app)
    first = await client.start(job, 1, queue="plain", dedup_key="order-7")
    again = await client.start(job, 2, queue="plain", dedup_key="order-7")
    assert (again.run_id, again.created, first.created) == (first.run_id, False, True)
    other = await client.start(job, 3, queue="urgent", dedup_key="order-7")  # per queue
    assert other.created and other.run_id != first.run_id
    # Once the run ended, the key starts a new one.
    worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.02))
    await worker.run_until_done([first.run_id, other.run_id], timeout=20)
    assert (await client.get(first.run_id)).status == "completed"
    later = await client.start(job, 4, queue="plain", dedup_key="order-7")
    assert later.created and later.run_id != first.run_id
    assert (later.queue, later.priority) == ("plain", 0)


# -- claiming -----------------------------------------------------------------------------
async def test_limits_bound_what_a_claim_takes(store: stead.Store) -> None:
    await start(stead.Client(store, app), "limited", 8)
    a = await store.claim_queue(LIMITED, "a", HOSTED, 30, 10)
    assert len(a) == 2  # per_worker
    b = await store.claim_queue(LIMITED, "b", HOSTED, 30, 10)
    assert len(b) == 1  # concurrency 3: one more
    assert await store.claim_queue(LIMITED, "c", HOSTED, 30, 10) == []
    assert {r.queue for r in a + b} == {"limited"}
    # A run ends: its room is free again.
    fence = stead.records.Fence(a[0].run_id, a[0].epoch, "a")
    await store.finish(fence, stead.records.RunStatus.COMPLETED, result="1")
    assert len(await store.claim_queue(LIMITED, "c", HOSTED, 30, 10)) == 1


async def test_the_plain_claim_leaves_queued_runs_alone(store: stead.Store) -> None:
    client = stead.Client(store, app)
    queued = await start(client, "plain", 2)
    loose = (await client.start(job, 9)).run_id
    assert [r.run_id for r in await store.claim("w", HOSTED, 30, 10)] == [loose]
    assert await store.claim_queue(URGENT, "w", HOSTED, 30, 10) == []  # another queue's runs
    taken = await store.claim_queue(PLAIN, "w", HOSTED, 30, 10)
    assert [r.run_id for r in taken] == queued  # first in, first out
    assert await store.claim_queue(PLAIN, "w", ["other@1"], 30, 10) == []


async def test_a_rate_counts_starts_over_its_period(fstore: stead.Store,
                                                    clock: stead.FakeClock) -> None:
    await start(stead.Client(fstore, app), "rated", 7)
    assert len(await fstore.claim_queue(RATED, "a", HOSTED, 60, 10)) == 3
    clock.advance(5)
    assert await fstore.claim_queue(RATED, "b", HOSTED, 60, 10) == []  # 3 in the last 10 s
    clock.advance(5.5)
    assert len(await fstore.claim_queue(RATED, "b", HOSTED, 60, 10)) == 3
    clock.advance(10.5)
    assert len(await fstore.claim_queue(RATED, "a", HOSTED, 60, 10)) == 1  # what is left


async def test_priority_order(store: stead.Store) -> None:
    client = stead.Client(store, app)
    order = [5, 1, 9, 1, 0, 5, 3]
    made = [(await client.start(job, i, queue="urgent", priority=p)).run_id
            for i, p in enumerate(order)]
    taken = []
    while got := await store.claim_queue(URGENT, "w", HOSTED, 30, 2):
        taken += [r.run_id for r in got]
    expected = [made[i] for i in sorted(range(len(order)), key=lambda i: (order[i], i))]
    assert taken == expected


async def test_a_due_sleeper_of_a_queue_is_claimed_by_its_queue(
        fstore: stead.Store, clock: stead.FakeClock) -> None:
    client = stead.Client(fstore, app)
    info = await client.start(napper, queue="limited")
    worker = stead.Worker(app, fstore, stead.WorkerOptions(poll_interval=0.01), clock=clock)
    working = asyncio.create_task(worker.run())
    await client.wait_for(info.run_id, ["waiting"], timeout=20)
    worker.stop()
    await working
    clock.advance(6)
    assert await fstore.claim("w", HOSTED, 30, 5) == []  # not the plain claim's
    [row] = await fstore.claim_queue(LIMITED, "w", HOSTED, 30, 5)
    assert row.run_id == info.run_id


async def test_a_worker_runs_its_queues_and_waits_out_a_rate(fstore: stead.Store,
                                                             clock: stead.FakeClock) -> None:
    client = stead.Client(fstore, app)
    ids = await start(client, "rated", 4) + await start(client, "urgent", 2, priority=3)
    ids.append((await client.start(job, 100)).run_id)
    worker = stead.Worker(app, fstore, stead.WorkerOptions(poll_interval=0.01), clock=clock)
    assert not await worker.run_until_done(ids, timeout=1.5)  # the rate holds one back
    done = [(await client.get(i)).status for i in ids]
    assert done.count("completed") == 6 and done[3] == "pending"
    clock.advance(11)
    assert await worker.run_until_done(ids, timeout=20)
    assert {(await client.get(i)).status for i in ids} == {"completed"}


async def test_one_read_names_the_queues_a_claim_would_find_work_in(
        fstore: stead.Store, clock: stead.FakeClock) -> None:
    """`ready_queues` names, in one read, each queue with a runnable run of
    hosted code not leased (nor excluded), or a sleeper that is due, as
    `queue_ready` says of one. An idle worker's claim asks it once however
    many queues its app declares."""
    named = stead.App("named")
    qs = {name: named.queue(name) for name in
          ("pending", "leased", "excluded", "asleep", "empty", "other_code")}
    named.queue("unnamed")

    @named.workflow()
    async def work(run: stead.Run) -> int:
        return 1

    @named.workflow()
    async def nap(run: stead.Run) -> str:
        await run.sleep(dt.timedelta(seconds=30))
        return "rested"

    client = stead.Client(fstore, named)
    await client.start(nap, queue="asleep")
    await stead.Worker(named, fstore).run_until_idle()  # it sleeps
    started = {queue: (await client.start(work, queue=queue)).run_id
               for queue in ("pending", "leased", "excluded", "unnamed")}
    other = stead.App("named")  # the same name, code of another version
    other.queue("other_code")

    @other.workflow(name="work", version=2)
    async def work_v2(run: stead.Run) -> int:
        return 2

    await stead.Client(fstore, other).start(work_v2, queue="other_code")
    hosted = named.hosted()
    await fstore.claim_queue(qs["leased"], "w", hosted, 60, 10)
    excluded = [started["excluded"]]
    ask = list(qs)

    async def each() -> set[str]:
        return {name for name in ask if await fstore.queue_ready(qs[name], hosted, excluded)}

    expected = {"pending"}
    assert await fstore.ready_queues(ask, hosted, excluded) == expected == await each()
    assert await fstore.ready_queues(ask, hosted) == {"pending", "excluded"}
    clock.advance(31)  # the sleeper is due
    expected = {"pending", "asleep"}
    assert await fstore.ready_queues(ask, hosted, excluded) == expected == await each()
    clock.advance(60)  # and the lease has run out
    expected = {"pending", "asleep", "leased"}
    assert await fstore.ready_queues(ask, hosted, excluded) == expected == await each()
    assert await fstore.ready_queues([], hosted) == set()
    assert await fstore.ready_queues(["unnamed"], hosted) == {"unnamed"}


async def test_a_worker_with_many_idle_queues_asks_once_per_claim(
        store: stead.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thirty queues declared, work in one: the worker's claims and its idle
    check read which queues have work once each, never queue by queue."""
    many = stead.App("many")
    for i in range(30):
        many.queue(f"q{i}")

    @many.workflow()
    async def work(run: stead.Run, n: int) -> int:
        return await run.step("n", lambda: n)

    client = stead.Client(store, many)
    ids = [(await client.start(work, i, queue="q7")).run_id for i in range(5)]
    ids.append((await client.start(work, 9)).run_id)
    asked: list[str] = []
    ready, one = store.ready_queues, store.queue_ready

    async def ready_queues(*args: object, **kwargs: object) -> set[str]:
        asked.append("ready_queues")
        return await ready(*args, **kwargs)  # type: ignore[arg-type]

    async def queue_ready(*args: object, **kwargs: object) -> bool:
        asked.append("queue_ready")
        return await one(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "ready_queues", ready_queues)
    monkeypatch.setattr(store, "queue_ready", queue_ready)
    await stead.Worker(many, store).run_until_idle()
    assert [await client.result(i, timeout=10) for i in ids] == [0, 1, 2, 3, 4, 9]
    assert "queue_ready" not in asked and asked
