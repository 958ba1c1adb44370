"""Fair claims across tenants, on both stores: the rule (`fair.shares`, a
property test), what a claim takes from tenants with runs ready, each
tenant's concurrency and rate limits, and concurrent claimers that never
take a run twice nor pass a limit. tests/test_tenant_processes.py holds the
limits against worker processes killed with SIGKILL."""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import time
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import stead
from stead.records import Fence
from stead.store.seam import UnsharedClaim
from stead.store.transactions import leases as leases_tx
from stead.tenants import fair
from stead.worker.claims import Claims
from stead.worker.holds import Holds
from tests.workers.procs import wait_until

app = stead.App("tenant_claims")


@app.workflow()
async def job(run: stead.Run, n: int) -> int:
    return n


HOSTED = app.hosted()
LEASE = 30.0


# -- the rule -------------------------------------------------------------------
LOADS = st.lists(
    st.tuples(st.integers(0, 30), st.integers(0, 40), st.integers(0, 30), st.integers(1, 5),
              st.none() | st.integers(1, 30), st.none() | st.integers(1, 30)),
    min_size=0, max_size=8)


@given(free=st.integers(0, 40), loads=LOADS, turn=st.integers(0, 10))
def test_shares_fill_the_fairest_first(
    free: int, loads: list[tuple[int, int, int, int, int | None, int | None]], turn: int,
) -> None:
    named = {f"t{i}": fair.Limits(weight, concurrency, rate, 60.0 if rate else 0.0)
             for i, (_, _, _, weight, concurrency, rate) in enumerate(loads)}
    policy = fair.Policy(fair.Limits(), named)
    given_loads = [fair.Load(f"t{i}", active, ready, recent)
                   for i, (active, ready, recent, *_) in enumerate(loads)]
    got = fair.shares(free, given_loads, policy, turn)
    room = {x.tenant: min(x.ready, policy.of(x.tenant).room(x.active, x.recent, free))
            for x in given_loads}
    # Never past a tenant's ready runs or its limits; every slot used that can be.
    assert all(0 < n <= room[t] for t, n in got.items())
    assert sum(got.values()) == min(free, sum(room.values()))
    # Water-filling: a tenant given a slot held no more per unit of weight,
    # before that last slot, than any tenant left with room.
    level = {x.tenant: (x.active + got.get(x.tenant, 0)) / policy.of(x.tenant).weight
             for x in given_loads}
    for t in got:
        before = level[t] - 1 / policy.of(t).weight
        for x in given_loads:
            if got.get(x.tenant, 0) < room[x.tenant]:
                assert before <= level[x.tenant] + 1e-9


@given(free=st.integers(0, 40), loads=LOADS, keep=st.integers(0, 5))
def test_kept_slots_go_to_tenants_with_nothing_in_flight(
    free: int, loads: list[tuple[int, int, int, int, int | None, int | None]], keep: int,
) -> None:
    policy = fair.Policy(named={f"t{i}": fair.Limits(weight) for i, (*_, weight, _c, _r)
                                in enumerate(loads)})
    given_loads = [fair.Load(f"t{i}", active, ready, recent)
                   for i, (active, ready, recent, *_) in enumerate(loads)]
    got = fair.shares(free, given_loads, policy, keep=keep)
    active = {x.tenant: x.active for x in given_loads}
    assert sum(got.values()) <= free
    weight = {x.tenant: policy.of(x.tenant).weight for x in given_loads}
    level = {t: (active[t] + got.get(t, 0)) / weight[t] for t in active}
    for t, n in got.items():
        others = max((v for u, v in level.items() if u != t), default=0.0)
        if active[t] > 0 and level[t] > others:
            # The busiest tenant with runs in flight takes no kept slot.
            assert n <= max(free - keep, 0)
    served_idle = sum(1 for t in got if active[t] == 0)
    idle = sum(1 for x in given_loads if x.active == 0 and x.ready > 0)
    # Nothing holds a tenant with no run in flight back but the slots themselves.
    assert served_idle >= min(idle, keep, free)


def _shares_one_slot_at_a_time(free: int, loads: list[fair.Load], policy: fair.Policy,
                               turn: int, keep: int) -> dict[str, int]:
    """The rule of `fair.shares` as it reads, each slot to the fairest of
    every tenant in turn (n per slot, n squared per kept slot): the model
    its heap and its one pass per kept slot are held to."""
    if free <= 0 or not loads:
        return {}
    order = [loads[(turn % len(loads) + i) % len(loads)] for i in range(len(loads))]
    room = {x.tenant: min(x.ready, policy.of(x.tenant).room(x.active, x.recent, free))
            for x in order}
    given = dict.fromkeys(room, 0)
    rank = {x.tenant: i for i, x in enumerate(order)}
    active = {x.tenant: x.active for x in order}
    weight = {t: policy.of(t).weight for t in room}

    def level(t: str) -> float:
        return (active[t] + given[t]) / weight[t]

    def may_keep(t: str) -> bool:
        held = active[t] + given[t]
        return held == 0 or (held + 1) / weight[t] <= max(
            (level(u) for u in active if u != t), default=0.0)

    for slot in range(free):  # the slots given so far, each to one tenant
        open_ = [t for t in room if given[t] < room[t]]
        if slot >= free - keep:
            open_ = [t for t in open_ if may_keep(t)]
        if not open_:
            break
        given[min(open_, key=lambda t: (level(t), rank[t]))] += 1
    return {t: n for t, n in given.items() if n > 0}


# Small counts and weights of 1 or 2: levels tie often, so the order ties go
# in is tried as well as the levels.
@example(free=3, loads=[(0, 2, 0, 1, None, None)] * 2, turn=1, keep=0)
@given(free=st.integers(0, 40), loads=st.lists(
    st.tuples(st.integers(0, 4), st.integers(0, 12), st.integers(0, 4), st.sampled_from([1, 2]),
              st.none() | st.integers(1, 8), st.none() | st.integers(1, 8)),
    max_size=12), turn=st.integers(0, 30), keep=st.integers(0, 6))
def test_shares_give_what_the_rule_gives_one_slot_at_a_time(
    free: int, loads: list[tuple[int, int, int, int, int | None, int | None]], turn: int,
    keep: int,
) -> None:
    named = {f"t{i}": fair.Limits(weight, concurrency, rate, 60.0 if rate else 0.0)
             for i, (_, _, _, weight, concurrency, rate) in enumerate(loads) if i % 3}
    policy = fair.Policy(fair.Limits(), named)
    given_loads = [fair.Load(f"t{i}", active, ready, recent)
                   for i, (active, ready, recent, *_) in enumerate(loads)]
    got = fair.shares(free, given_loads, policy, turn, keep)
    want = _shares_one_slot_at_a_time(free, given_loads, policy, turn, keep)
    assert list(got.items()) == list(want.items())


def test_equal_tenants_share_alike_whatever_their_backlog() -> None:
    loads = [fair.Load("big", 0, 10_000), fair.Load("small", 0, 3)]
    assert fair.shares(4, loads, fair.Policy()) == {"big": 2, "small": 2}
    heavy = fair.Policy(named={"big": fair.Limits(weight=3)})
    assert fair.shares(8, loads, heavy) == {"big": 6, "small": 2}
    # Busy already: the idle tenant gets the slots until it catches up.
    assert fair.shares(3, [fair.Load("big", 10, 99), fair.Load("small", 0, 5)],
                       fair.Policy()) == {"small": 3}
    # The last slot kept for a tenant with nothing in flight: the busy one leaves it.
    assert fair.shares(1, [fair.Load("big", 15, 99)], fair.Policy(), keep=1) == {}
    assert fair.shares(1, [fair.Load("big", 15, 99), fair.Load("new", 0, 1)], fair.Policy(),
                       keep=1) == {"new": 1}
    # A backlog whose runs all ended just before the claim has nothing in
    # flight either: it takes one kept slot at most, and leaves the other.
    assert fair.shares(16, [fair.Load("big", 0, 10_000)], fair.Policy(), keep=1) == {"big": 15}
    assert fair.shares(16, [fair.Load("big", 0, 10_000), fair.Load("new", 0, 1)],
                       fair.Policy(), keep=1) == {"big": 14, "new": 1}
    # A tenant far below its share (its runs started one by one while the
    # burst filled the slots) takes the kept slot too.
    assert fair.shares(1, [fair.Load("big", 13, 99), fair.Load("few", 2, 1)], fair.Policy(),
                       keep=1) == {"few": 1}


def test_bad_limits_are_refused() -> None:
    with pytest.raises(stead.InvalidValue):
        app.tenant("w0", weight=0)
    with pytest.raises(stead.InvalidTenant):
        app.tenant("no way", weight=2)
    limited = stead.App("twice")
    limited.tenant("acme", concurrency=2)
    with pytest.raises(stead.InvalidTenant, match="twice"):
        limited.tenant("acme", concurrency=3)


# -- on a store -------------------------------------------------------------------
async def _start(client: stead.Client, tenant: str | None, count: int) -> list[str]:
    made = await client.start_many([stead.Start(job, (i,), tenant=tenant) for i in range(count)])
    return [m.run_id for m in made]


async def _tenants_of(store: stead.Store, rows: list[stead.RunRow]) -> collections.Counter[str]:
    return collections.Counter([(await store.get_run(r.run_id)).tenant or "" for r in rows])


async def test_a_burst_does_not_take_every_slot(store: stead.Store) -> None:
    client = stead.Client(store, app)
    await _start(client, "a", 200)
    await _start(client, "b", 3)
    first = await store.claim_fair(fair.Policy(), "w1", HOSTED, LEASE, 4)
    assert await _tenants_of(store, first) == {"a": 2, "b": 2}
    second = await store.claim_fair(fair.Policy(), "w1", HOSTED, LEASE, 4)
    # b has one run left: it takes it, a the rest.
    assert await _tenants_of(store, second) == {"a": 3, "b": 1}
    third = await store.claim_fair(fair.Policy(), "w1", HOSTED, LEASE, 4)
    assert await _tenants_of(store, third) == {"a": 4}
    # Each run the claim returns names its tenant, as the store does (one
    # tenant's claim and several tenants' in one statement alike).
    for rows in (first, second, third):
        assert collections.Counter(r.tenant or "" for r in rows) == \
            await _tenants_of(store, rows)


async def test_a_fair_claim_of_runs_of_no_tenant_names_none(store: stead.Store) -> None:
    client = stead.Client(store, app)
    await _start(client, None, 2)
    await _start(client, "a", 2)
    taken = await store.claim_fair(fair.Policy(), "w1", HOSTED, LEASE, 4)
    assert sorted(r.tenant or "-" for r in taken) == ["-", "-", "a", "a"]
    assert {r.tenant for r in taken} == {None, "a"}  # none is None, never ''


async def test_a_backlog_with_nothing_in_flight_leaves_the_kept_slot(
        store: stead.Store) -> None:
    client = stead.Client(store, app)
    await _start(client, "a", 100)
    # Every slot free and a's runs all ended: a takes all but the kept one.
    first = await store.claim_fair(fair.Policy(), "w1", HOSTED, LEASE, 16, keep=1)
    assert await _tenants_of(store, first) == {"a": 15}
    late = await _start(client, "b", 1)  # b starts a run beside the burst: a slot waits
    taken = await store.claim_fair(fair.Policy(), "w1", HOSTED, LEASE, 1, keep=1)
    assert [r.run_id for r in taken] == late


async def test_a_worker_keeps_the_headroom_while_a_tenant_is_between_runs(
        store: stead.Store) -> None:
    client = stead.Client(store, app)
    await _start(client, "a", 40)
    claims = Claims(app, store, store.clock, "w1", stead.WorkerOptions(concurrency=16),
                    stop_for=lambda *_: None)
    # Several tenants had runs ready a moment ago: b's last run ended, its
    # next is not started yet. a alone has runs ready, and leaves b a slot.
    claims._several_at = time.monotonic()
    assert len(await claims.claim(16, [])) == 15
    # Long after: a tenant alone takes every slot.
    claims._fair_until = claims._several_at = 0.0
    assert len(await claims.claim(16, [])) == 16


def test_holds_judge_by_the_last_runs_and_those_in_flight() -> None:
    holds = Holds(4)
    assert holds.longer_than(0.01, 0.0)  # nothing to judge by: the slot is kept
    for i in range(6):  # runs that each held their slot 2 ms
        holds.began(f"quick{i}", 10.0)
        holds.ended(f"quick{i}", 10.002)
    assert not holds.longer_than(0.01, 10.002)
    for i in range(5):  # runs turning long show before they end
        holds.began(f"long{i}", 10.0)
    assert holds.in_flight == 5
    assert holds.in_flight_within(0.01, 10.005) == 5
    assert holds.in_flight_within(0.01, 10.5) == 0
    assert not holds.longer_than(0.01, 10.005)
    assert holds.longer_than(0.01, 10.5)
    holds.ended("never began", 11.0)  # a run handed back unexecuted: nothing to judge
    assert holds.in_flight == 5


def _sharing_claims(store: stead.Store, **options: Any) -> tuple[Claims, Holds]:
    """The claims of a worker of 16 slots that saw several tenants with runs
    ready a moment ago, and what it knows of its runs' holds."""
    holds = Holds(16)
    claims = Claims(app, store, store.clock, "w1", stead.WorkerOptions(concurrency=16, **options),
                    stop_for=lambda *_: None, holds=holds)
    claims._several_at = time.monotonic()
    return claims, holds


async def test_quick_runs_leave_a_busy_tenant_the_slots_that_free_one_by_one(
        store: stead.Store) -> None:
    """Runs that end within `tenant_headroom_hold` free their slots together:
    while most slots are busy, the one freed early goes only to a newcomer,
    and the busy tenant's next runs are claimed with the rest of the wave."""
    client = stead.Client(store, app)
    await _start(client, "a", 60)
    claims, holds = _sharing_claims(store)
    first = await claims.claim(16, [])
    assert len(first) == 15  # nothing known of the holds yet: the slot is kept
    now = time.monotonic()
    for i in range(16):  # runs here end 2 ms after their claim
        holds.began(f"done{i}", now - 0.002)
        holds.ended(f"done{i}", now)
    for row in first:
        holds.began(row.run_id, now)
    holds.ended(first[0].run_id, time.monotonic())  # one ended early: 14 busy, 2 free
    assert await claims.claim(2, []) == []  # a waits for the wave
    late = await _start(client, "b", 1)
    assert [r.run_id for r in await claims.claim(2, [])] == late  # a newcomer does not
    now = time.monotonic()
    for row in first:  # the wave ends: a takes all but the kept slot again
        holds.ended(row.run_id, now)
    assert await _tenants_of(store, await claims.claim(15, [])) == {"a": 14}


async def test_a_run_ended_in_the_store_holds_its_slot_until_the_worker_sees_it_end(
        store: stead.Store) -> None:
    """A wave of quick runs ends in the store (one group commit) before the
    worker's loop has seen each run end: its tenant is still busy to the
    worker's claim, which leaves the slot to a newcomer, not to it."""
    client = stead.Client(store, app)
    await _start(client, "a", 40)
    claims, holds = _sharing_claims(store)
    first = await claims.claim(16, [])
    assert [r.tenant for r in first] == ["a"] * 15  # a fair claim names each run's tenant
    now = time.monotonic()
    for row in first:
        holds.began(row.run_id, now)
    assert holds.held() == {"a": 15}
    for row in first:  # ended in the store: a has no run leased there
        await store.release(Fence(row.run_id, row.epoch, "w1"))
    assert await claims.claim(1, []) == []
    late = await _start(client, None, 1)  # runs of no tenant are a newcomer too
    [taken] = await claims.claim(1, [])
    assert taken.run_id == late[0] and taken.tenant is None
    assert holds.held() == {"a": 15, "": 1}
    for row in first:
        holds.ended(row.run_id, time.monotonic())
    assert holds.held() == {"": 1}


async def test_the_read_back_of_a_fair_claim_names_each_runs_tenant(
        fstore: stead.Store) -> None:
    client = stead.Client(fstore, app)
    await _start(client, "a", 2)
    await _start(client, None, 2)
    taken = await fstore.claim_fair(fair.Policy(), "w1", HOSTED, LEASE, 4)
    read = await fstore.database.read(lambda: leases_tx.fair_claimed(
        {"worker_id": "w1", "now": fstore.clock.now(), "exclude": []}))
    assert sorted((r.run_id, r.tenant) for r in read) == \
        sorted((r.run_id, r.tenant) for r in taken)
    assert sorted(str(r.tenant) for r in read) == ["None", "None", "a", "a"]


async def test_runs_that_hold_their_slots_keep_the_headroom_as_they_free(
        store: stead.Store) -> None:
    client = stead.Client(store, app)
    await _start(client, "a", 60)
    for hold_option, taken in ((0.01, 1), (0.0, 1)):
        claims, holds = _sharing_claims(store, tenant_headroom_hold=hold_option)
        now = time.monotonic()
        for i in range(14):  # runs in flight for a second already
            holds.began(f"long{i}", now - 1.0)
        # Two slots free: a takes one, the other is kept for a newcomer.
        assert len(await claims.claim(2, [])) == taken
    claims, quick = _sharing_claims(store, tenant_headroom_hold=0.0)
    now = time.monotonic()
    for i in range(14):  # quick runs, but 0 keeps the headroom whatever they hold
        quick.began(f"quick{i}", now)
    assert len(await claims.claim(2, [])) == 1
    claims, beside_long = _sharing_claims(store)
    now = time.monotonic()
    for i in range(16):  # most runs end quickly, ...
        beside_long.began(f"done{i}", now - 0.002)
        beside_long.ended(f"done{i}", now)
    for i in range(14):  # ... but these hold their slots: no wave is coming
        beside_long.began(f"long{i}", now - 1.0)
    assert len(await claims.claim(2, [])) == 1
    claims, none_kept = _sharing_claims(store, tenant_headroom=0)
    for i in range(14):  # no headroom: quick runs or not, every free slot is given
        none_kept.began(f"quick{i}", time.monotonic())
    assert len(await claims.claim(2, [])) == 2


async def test_weights_share_the_slots(store: stead.Store) -> None:
    client = stead.Client(store, app)
    await _start(client, "gold", 50)
    await _start(client, None, 50)
    policy = fair.Policy(named={"gold": fair.Limits(weight=3)})
    taken = await store.claim_fair(policy, "w1", HOSTED, LEASE, 8)
    assert await _tenants_of(store, taken) == {"gold": 6, "": 2}


async def test_one_tenant_claims_as_the_plain_claim(store: stead.Store) -> None:
    client = stead.Client(store, app)
    ids = await _start(client, None, 5)
    assert await store.ready_tenants() == [""]
    taken = await store.claim_fair(fair.Policy(), "w1", HOSTED, LEASE, 10)
    assert [r.run_id for r in taken] == ids  # oldest first, as the plain claim
    await _start(client, "b", 1)
    assert await store.ready_tenants() == ["", "b"]


async def test_the_unshared_claim_takes_runs_only_while_one_tenant_has_runs_ready(
        store: stead.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """`claim_unshared` is the plain claim while at most one tenant (runs of
    none are one) has runs ready, and takes nothing once several have, naming
    them; on PostgreSQL in one statement."""
    looked: list[str] = []
    if store.url.startswith("postgres"):
        from stead.store.postgres import database as pg_database

        class Noting(dict[str, str]):
            def __getitem__(self, name: str) -> str:
                looked.append(name)
                return super().__getitem__(name)

        monkeypatch.setattr(pg_database, "Q", Noting(pg_database.Q))
    client = stead.Client(store, app)
    assert await store.claim_unshared("w1", HOSTED, LEASE, 10) == UnsharedClaim([], [])
    b = await _start(client, "b", 3)
    looked.clear()
    got = await store.claim_unshared("w1", HOSTED, LEASE, 2)
    assert got.tenants == ["b"] and [r.run_id for r in got.runs] == b[:2]
    assert all(r.lease_owner == "w1" and r.status == "running" for r in got.runs)
    if store.url.startswith("postgres"):
        assert looked == ["claim_unshared"], looked
    none = await _start(client, None, 2)
    got = await store.claim_unshared("w1", HOSTED, LEASE, 10)
    assert got == UnsharedClaim(["", "b"], [])  # several: a claim shared among them
    assert {(await store.get_run(r)).status for r in [b[2], *none]} == {"pending"}
    taken = await store.claim_fair(fair.Policy(), "w1", HOSTED, LEASE, 10)
    assert {r.run_id for r in taken} == {b[2], *none}


async def test_a_worker_that_finds_several_tenants_ready_shares_that_same_claim(
        store: stead.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that shared nothing lately claims with `claim_unshared`,
    asking no `ready_tenants` first; finding several tenants, it shares the
    same claim among them, and asks `ready_tenants` again only once sharing."""
    client = stead.Client(store, app)
    await _start(client, "a", 200)
    claims = Claims(app, store, store.clock, "w1", stead.WorkerOptions(concurrency=16),
                    stop_for=lambda *_: None)
    asked: list[str] = []
    real = store.ready_tenants

    async def ready_tenants() -> list[str]:
        asked.append("ready_tenants")
        return await real()

    monkeypatch.setattr(store, "ready_tenants", ready_tenants)
    assert await _tenants_of(store, await claims.claim(4, [])) == {"a": 4}
    assert asked == []  # one tenant: the plain claim, with no read before it
    await _start(client, "b", 3)
    # Shared: b, with no run in flight, first (a has four).
    assert await _tenants_of(store, await claims.claim(4, [])) == {"b": 3}
    assert asked == []  # the unshared claim named both: shared at once


async def test_a_claim_takes_each_tenants_oldest_claimable_runs_in_one_statement(
        fstore: stead.Store, clock: stead.FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a fair claim takes of each tenant: its oldest runs that a claim
    could take (a due sleeper among them by its creation), never one leased
    live, excluded, of code not hosted or in a queue. On PostgreSQL the
    tenants' runs are claimed in one statement, not one per tenant."""
    mixed = stead.App("mixed")
    mixed.queue("side")

    @mixed.workflow()
    async def work(run: stead.Run) -> int:
        return 1

    @mixed.workflow()
    async def nap(run: stead.Run) -> str:
        await run.sleep(dt.timedelta(seconds=30))
        return "rested"

    client = stead.Client(fstore, mixed)
    hosted = mixed.hosted()
    sleeper = (await client.start(nap, tenant="a")).run_id
    await stead.Worker(mixed, fstore).run_until_idle()  # it sleeps
    b0 = (await client.start(work, tenant="b")).run_id
    [held] = await fstore.claim("elsewhere", hosted, 60, 1, exclude=[])
    assert held.run_id == b0  # leased live by another worker
    runs = {}
    for name in ("a1", "b1", "c0", "c1", "a2", "b2"):
        clock.advance(1)  # each created after the one before
        runs[name] = (await client.start(work, tenant=name[0])).run_id
    await client.start(work, tenant="c", queue="side")
    other = stead.App("mixed")

    @other.workflow(name="work", version=2)
    async def work_v2(run: stead.Run) -> int:
        return 2

    await stead.Client(fstore, other).start(work_v2, tenant="d")
    clock.advance(25)  # the sleeper is due

    names: list[str] = []
    if fstore.url.startswith("postgres"):
        from stead.store.postgres import database as pg_database

        real_do = pg_database._do

        async def noting(conn: Any, step: Any) -> Any:
            names.append(getattr(step, "name", ""))
            return await real_do(conn, step)

        monkeypatch.setattr(pg_database, "_do", noting)
    exclude = [runs["c0"]]
    # Two slots: b holds a run already, so a and c take one each, their oldest.
    first = await fstore.claim_fair(fair.Policy(), "w", hosted, LEASE, 2, exclude=exclude)
    assert {r.run_id for r in first} == {sleeper, runs["c1"]}
    rest = await fstore.claim_fair(fair.Policy(), "w", hosted, LEASE, 20, exclude=exclude)
    assert {r.run_id for r in rest} == {runs["a1"], runs["a2"], runs["b1"], runs["b2"]}
    assert all(r.lease_owner == "w" and r.epoch >= 1 for r in first + rest)
    assert await fstore.claim_fair(fair.Policy(), "w", hosted, LEASE, 20,
                                   exclude=exclude) == []
    if names:
        assert "claim_tenants" in names and "claim_tenant" not in names, names


async def test_a_tenants_concurrency_holds_across_claims(store: stead.Store) -> None:
    client = stead.Client(store, app)
    await _start(client, "capped", 20)
    await _start(client, "free", 20)
    policy = fair.Policy(named={"capped": fair.Limits(concurrency=3)})
    seen: collections.Counter[str] = collections.Counter()
    for worker in ("w1", "w2", "w3"):
        seen += await _tenants_of(store, await store.claim_fair(policy, worker, HOSTED,
                                                                  LEASE, 5))
    assert seen == {"capped": 3, "free": 12}


async def test_a_tenants_rate_holds(store: stead.Store) -> None:
    client = stead.Client(store, app)
    await _start(client, "rated", 20)
    policy = fair.Policy(named={"rated": fair.Limits(rate=4, period=3600.0)})
    first = await store.claim_fair(policy, "w1", HOSTED, LEASE, 10)
    again = await store.claim_fair(policy, "w2", HOSTED, LEASE, 10)
    assert len(first) == 4 and again == []


async def test_concurrent_claimers_take_each_run_once(db_url: str) -> None:
    setup = await stead.open_store(db_url)
    client = stead.Client(setup, app)
    await _start(client, "a", 60)
    await _start(client, "b", 30)
    await _start(client, "capped", 30)
    policy = fair.Policy(named={"capped": fair.Limits(concurrency=4)})
    stores = [await stead.open_store(db_url) for _ in range(4)]

    async def claimer(store: stead.Store, worker: str) -> list[str]:
        got: list[str] = []
        for _ in range(12):
            got += [r.run_id for r in await store.claim_fair(policy, worker, HOSTED,
                                                               LEASE, 3)]
        return got

    try:
        taken = await asyncio.gather(*(claimer(s, f"w{i}") for i, s in enumerate(stores)))
        every = [run for got in taken for run in got]
        assert len(every) == len(set(every))  # no run claimed twice
        tenants = collections.Counter([(await setup.get_run(r)).tenant for r in every])
        assert tenants["capped"] == 4  # its limit, across four claimers
        assert tenants["a"] + tenants["b"] == len(every) - 4
    finally:
        for s in stores:
            await s.close()
        await setup.close()


async def test_workers_claiming_at_once_share_their_slots_among_tenants(db_url: str) -> None:
    """Eight workers of one slot each claim at the same moment beside two
    tenants' equal backlogs: both tenants get runs. On PostgreSQL the claims
    read the same loads (a tie), and each worker breaks it from a place of
    its own; when every worker broke it alike, all eight went to one tenant."""
    setup = await stead.open_store(db_url)
    await stead.Client(setup, app).start_many(
        [stead.Start(job, (i,), tenant=t) for t in ("a", "b") for i in range(20)])
    stores = [await stead.open_store(db_url) for _ in range(8)]
    try:
        claims = [Claims(app, s, s.clock, f"w{i}", stead.WorkerOptions(concurrency=1),
                         stop_for=lambda *_: None) for i, s in enumerate(stores)]
        for c, s in zip(claims, stores, strict=True):
            c._several_at = time.monotonic()  # several tenants had runs ready: claims share
            await s.ready_tenants()  # each store's connection made: the claims meet
        taken = await asyncio.gather(*(c.claim(1, []) for c in claims))
        tenants = collections.Counter([r.tenant for got in taken for r in got])
        assert sum(tenants.values()) == 8
        assert tenants["a"] >= 1 and tenants["b"] >= 1, tenants
    finally:
        for s in stores:
            await s.close()
        await setup.close()


async def test_a_worker_runs_every_tenants_runs(store: stead.Store) -> None:
    limited = stead.App("limited_worker")
    limited.tenant("capped", concurrency=1)

    @limited.workflow()
    async def step(run: stead.Run, n: int) -> int:
        return await run.step("n", lambda: n * 2)

    client = stead.Client(store, limited)
    ids = [(await client.start(step, i, tenant=t)).run_id
           for i, t in enumerate(["capped", "capped", "other", None, "capped"])]
    await stead.Worker(limited, store).run_until_idle()
    assert [await client.result(r, timeout=5) for r in ids] == [0, 2, 4, 6, 8]


def test_a_small_worker_keeps_no_slot_unless_told() -> None:
    """By default only a worker of `AUTO_HEADROOM_FROM` slots or more keeps one
    for a newcomer tenant; a headroom given is taken as it is."""
    from stead.worker.options import AUTO_HEADROOM_FROM

    assert stead.WorkerOptions().headroom == 1  # sixteen slots
    assert stead.WorkerOptions(concurrency=AUTO_HEADROOM_FROM).headroom == 1
    assert stead.WorkerOptions(concurrency=AUTO_HEADROOM_FROM - 1).headroom == 0
    assert stead.WorkerOptions(concurrency=1).headroom == 0
    assert stead.WorkerOptions(concurrency=1, tenant_headroom=1).headroom == 1
    assert stead.WorkerOptions(concurrency=32, tenant_headroom=0).headroom == 0
    for bad in (-1, 1.5, "1", True):
        with pytest.raises(stead.errors.InvalidInput, match="tenant_headroom"):
            stead.WorkerOptions(tenant_headroom=bad)  # type: ignore[arg-type]


async def test_a_fleet_of_single_slot_workers_runs_every_slot_beside_two_backlogs(
        store: stead.Store) -> None:
    """Six workers of one slot each, two tenants with backlogs: six runs in
    flight at once, not one per tenant with every other slot kept free.
    (Which tenant each slot goes to is the claims' race: on PostgreSQL
    concurrent claimers read the same loads.)"""
    fleet = stead.App("single_slots")
    gate = asyncio.Event()

    @fleet.workflow()
    async def held(run: stead.Run, n: int) -> int:
        async def wait() -> int:
            await gate.wait()
            return n
        return await run.step("held", wait)

    client = stead.Client(store, fleet)
    await client.start_many([stead.Start("held", [i], tenant=t)
                             for t in ("a", "b") for i in range(8)])
    workers = [stead.Worker(fleet, store, stead.WorkerOptions(
        concurrency=1, poll_interval=0.05, worker_id=f"w{i}")) for i in range(6)]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        deadline = time.monotonic() + 10
        leased: list[stead.records.RunRow] = []
        while len(leased) < 6:
            assert time.monotonic() < deadline, f"{len(leased)} runs in flight on 6 slots"
            await asyncio.sleep(0.02)
            leased = await store.leased_runs(limit=100)
        gate.set()

        async def all_done() -> bool:
            return (await store.count_runs()).get(stead.records.RunStatus.COMPLETED, 0) == 16

        await wait_until("the runs to complete", all_done, timeout=10)
    finally:
        gate.set()
        for w in workers:
            w.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
