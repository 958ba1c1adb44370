"""A tenant's spend budget, shared by all its runs: reserved before each call,
judged under the tenant's row lock (two workers at once cannot together pass
it), its over-budget runs paused with the reason and resumed when the budget
is raised; other tenants unaffected. Hypothesis plays calls that answer, fail
or die mid-call against a tenant's budget, and checks the accounting."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import stead
from stead.spend import ReservationState
from tests import stress
from tests.helpers import Crash

LEASE = 30.0
MESSAGES = [{"role": "user", "content": "hi"}]  # 35 characters of JSON: 9 tokens
# Each call below is estimated at 9 + 41 = 50 tokens (max_tokens=41).
ESTIMATE = 50


class Model:
    """Answers with `usage` tokens each (20 in, the rest out), after `delay`;
    a call listed in `fail` raises, one in `die` is a worker dying mid-call.
    `held` notes what the tenant held at each send (read in the call)."""

    name = "tenant-model"

    def __init__(self, store: stead.Store, tenant: str, usage: Sequence[int] = (),
                 fail: Sequence[int] = (), die: Sequence[int] = (), delay: float = 0.0) -> None:
        self.store, self.tenant = store, tenant
        self.usage, self.fail, self.die = list(usage), set(fail), set(die)
        self.delay = delay
        self.sent = 0
        self.held: list[int] = []

    async def complete(self, messages: Sequence[Mapping[str, Any]],
                       **params: Any) -> stead.Completion:
        self.sent += 1
        n = self.sent
        spend = await self.store.tenant_spend(self.tenant)
        self.held.append(spend["tokens"] + spend["reserved_tokens"])
        if self.delay:
            await asyncio.sleep(self.delay)
        if n in self.die:
            raise Crash()
        if n in self.fail:
            raise ConnectionError("dropped")
        used = self.usage[(n - 1) % len(self.usage)] if self.usage else 40
        return stead.Completion(text=f"a{n}", model=self.name, usage=stead.Usage(
            input_tokens=min(20, used), output_tokens=max(0, used - 20)))


def _app(model: Model, calls: int, retry: stead.Retry | None = None) -> stead.App:
    app = stead.App(f"spend-{uuid.uuid4().hex[:6]}")

    @app.workflow(name="talk")
    async def talk(run: stead.Run) -> list[str]:
        return [(await run.llm(f"q{i}", model, MESSAGES, max_tokens=41, retry=retry)).text
                for i in range(calls)]

    return app


async def _work(app: stead.App, store: stead.Store, clock: stead.FakeClock,
                rounds: int = 3) -> None:
    for _ in range(rounds):  # a worker that "died" leaves its lease: take the run over
        await stead.Worker(app, store, stead.WorkerOptions(lease_seconds=LEASE)
                           ).run_until_idle()
        clock.advance(LEASE + 1)


async def _consistent(store: stead.Store, tenant: str, run_ids: Sequence[str]) -> list[Any]:
    """The tenant's counts agree with its reservations; returns them."""
    held = [r for run_id in run_ids for r in await store.reservations(run_id)]
    spend = await store.tenant_spend(tenant)
    counted = (ReservationState.SETTLED, ReservationState.DIED)
    assert spend["tokens"] == sum(r["tokens"] for r in held if r["state"] in counted)
    assert spend["reserved_tokens"] == sum(
        r["tokens"] for r in held if r["state"] == ReservationState.RESERVED)
    return held


async def test_a_tenant_budget_pauses_all_its_runs_and_no_other_tenant(
        fstore: stead.Store, clock: stead.FakeClock) -> None:
    model = Model(fstore, "acme")
    app = _app(model, calls=2)
    client = stead.Client(fstore, app)
    # Three calls of 40 tokens fit, reserved at 50 each: a fourth would pass 160.
    await client.set_tenant_limits("acme", tokens=160, by="ops", why="trial")
    runs = [await client.start("talk", tenant="acme") for _ in range(2)]
    other = await client.start("talk", tenant="globex")
    await _work(app, fstore, clock, rounds=1)
    assert await client.result(other.run_id) == ["a1", "a2"] or (
        await client.get(other.run_id)).status == "completed"
    rows = [await client.get(r.run_id) for r in runs]
    paused = [r for r in rows if r.status == "paused"]
    assert paused, [r.status for r in rows]
    for row in paused:
        assert row.error["cause"] == "spend" and row.error["scope"] == "tenant"
        assert row.error["tenant"] == "acme" and row.error["unit"] == "tokens"
        assert "the tokens budget of tenant 'acme'" in row.error["message"]
        assert "stead tenants set acme --tokens" in row.error["message"]
    seen = await client.tenant_spend("acme")
    assert set(seen.paused) == {r.run_id for r in paused}
    assert seen.tokens == 120 and seen.reserved_tokens == 0
    assert max(model.held) <= 160
    # globex has no limits: its calls were reserved and settled all the same.
    assert (await client.tenant_spend("globex")).tokens == 80

    await client.set_tenant_limits("acme", tokens=1000, by="ops", why="paid")
    await _work(app, fstore, clock, rounds=1)
    assert [(await client.get(r.run_id)).status for r in runs] == ["completed"] * 2
    assert (await client.tenant_spend("acme")).tokens == 160
    await _consistent(fstore, "acme", [r.run_id for r in runs])


async def test_two_workers_reserving_at_once_cannot_together_pass_the_budget(
        db_url: str) -> None:
    stores = [await stead.open_store(db_url) for _ in range(2)]
    try:
        model = Model(stores[0], "burst", delay=0.2)
        app = _app(model, calls=1)
        client = stead.Client(stores[0], app)
        await client.set_tenant_limits("burst", tokens=5 * ESTIMATE, by="ops", why="cap")
        runs = [await client.start("talk", tenant="burst") for _ in range(12)]
        options = stead.WorkerOptions(concurrency=6, poll_interval=0.02)
        await asyncio.gather(*(stead.Worker(app, s, options).run_until_idle() for s in stores))
        statuses = [(await client.get(r.run_id)).status for r in runs]
        # Each call held 50 while in flight: five fit the budget at once, and
        # those five, settled at 40, leave room for one more.
        assert statuses.count("completed") == model.sent
        assert model.sent <= 6 and max(model.held) <= 5 * ESTIMATE
        assert statuses.count("paused") == 12 - model.sent
        await _consistent(stores[0], "burst", [r.run_id for r in runs])
    finally:
        for s in stores:
            await s.close()


calls = st.lists(st.tuples(st.integers(min_value=0, max_value=120),
                           st.sampled_from(["ok", "ok", "fail", "die"])),
                 min_size=1, max_size=6)


@settings(max_examples=stress.examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan=calls, budget=st.integers(min_value=0, max_value=400), runs=st.integers(1, 3))
# Three workers dying, the last one in the third round of work.
@example(plan=[(0, "die"), (0, "ok"), (0, "die"), (0, "die")], budget=150, runs=1)
# Calls using more than their estimate, settling while other runs' calls are sent.
@example(plan=[(120, "die"), (102, "fail"), (18, "ok"), (120, "fail"), (25, "ok"), (0, "die")],
         budget=261, runs=3)
async def test_reserve_settle_release_accounting_holds(
        fstore: stead.Store, clock: stead.FakeClock, plan: list[tuple[int, str]], budget: int,
        runs: int) -> None:
    tenant = f"t{uuid.uuid4().hex[:10]}"
    usage = [u for u, _ in plan]
    model = Model(fstore, tenant, usage=usage,
                  fail=[i + 1 for i, (_, what) in enumerate(plan) if what == "fail"],
                  die=[i + 1 for i, (_, what) in enumerate(plan) if what == "die"])
    app = _app(model, calls=len(plan), retry=stead.Retry(attempts=2, backoff=0.0))
    client = stead.Client(fstore, app)
    await client.set_tenant_limits(tenant, tokens=budget, by="ops", why="property")
    started = [await client.start("talk", tenant=tenant) for _ in range(runs)]
    # Each worker that dies leaves a lease the next round takes over.
    await _work(app, fstore, clock, rounds=1 + sum(what == "die" for _, what in plan))
    held = await _consistent(fstore, tenant, [r.run_id for r in started])
    # Every attempt sent had reserved first, and only one reservation each.
    assert len(held) == model.sent
    answered = [r for r in held if r["state"] == ReservationState.SETTLED]
    # At each send, what the tenant held (its reservation included) fit. A
    # call is admitted at its estimate and settles at what it used: beside
    # other runs, a call that used more may settle between another's
    # reservation and its send, so the tenant may hold that much over then.
    over = 0 if runs == 1 else sum(max(0, r["tokens"] - ESTIMATE) for r in answered)
    assert all(h <= budget + over for h in model.held), (model.held, budget, over)
    assert sum(r["tokens"] for r in answered) <= sum(usage) * runs * 2
    for row in [await client.get(r.run_id) for r in started]:
        assert row.status in ("completed", "paused", "failed"), row.error
        if row.status == "paused":
            assert row.error["cause"] == "spend"


@pytest.mark.parametrize("limit", [-1, 1.5, "x"])
async def test_limits_out_of_range_are_refused(store: stead.Store, limit: Any) -> None:
    client = stead.Client(store)
    with pytest.raises(stead.errors.InvalidValue):
        await client.set_tenant_limits("acme", tokens=limit, by="ops", why="typo")
    with pytest.raises(stead.errors.InvalidTenant):
        await client.set_tenant_limits("no tenant!", tokens=1, by="ops", why="typo")


async def test_an_attempt_dead_mid_call_is_counted_at_its_estimate_once(
        fstore: stead.Store, clock: stead.FakeClock) -> None:
    model = Model(fstore, "acme", die=[1])
    app = _app(model, calls=1)
    client = stead.Client(fstore, app)
    info = await client.start("talk", tenant="acme")
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=LEASE)).run_until_idle()
    held = await _consistent(fstore, "acme", [info.run_id])
    assert [(r["attempt"], r["state"]) for r in held] == [(1, ReservationState.RESERVED)]
    assert (await fstore.tenant_spend("acme"))["reserved_tokens"] == ESTIMATE
    clock.advance(LEASE + 1)
    await _work(app, fstore, clock)
    assert await client.result(info.run_id) == ["a2"]
    held = await _consistent(fstore, "acme", [info.run_id])
    assert [(r["attempt"], r["state"], r["tokens"]) for r in held] == [
        (1, ReservationState.DIED, ESTIMATE), (2, ReservationState.SETTLED, 40)]
    assert model.sent == 2
