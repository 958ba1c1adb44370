"""Property: whatever happens to a run's grants and budget between its
attempts (time passing, renewals, resumes, crashes), an effect with a tool is
never sent without a covering, unexpired grant in force when its intent
commits, and the budget is never spent twice.

Hypothesis draws the amounts a workflow pays, the run's first grant and
budget, the steps after which a worker crashes, and a sequence of outside
events. Every example runs real stead code on a fresh SQLite file; a crash is
`Crash` (a BaseException) raised in a step after an effect, and a new worker
takes the run over once the fake-clock lease has expired.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from typing import Any

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import stead
from tests import stress
from tests.helpers import Crash

LEASE = 30.0

events = st.lists(st.one_of(
    st.tuples(st.just("advance"), st.integers(min_value=1, max_value=400)),
    st.tuples(st.just("renew"), st.integers(min_value=10, max_value=400),
              st.integers(min_value=0, max_value=100)),
    st.tuples(st.just("resume"), st.integers(min_value=0, max_value=6)),
    st.tuples(st.just("work"), st.just(0)),
), max_size=10)


async def scenario(amounts: list[int], limit: int, expires_in: int, effects: int,
                   crash_after: set[int], outside: list[tuple[Any, ...]]) -> None:
    clock = stead.FakeClock()
    with tempfile.TemporaryDirectory() as folder:
        store = await stead.open_store(f"sqlite:///{folder}/stead.db", clock=clock,
                                       lease_clock=clock)
        try:
            await _play(store, clock, amounts, limit, expires_in, effects, crash_after, outside)
        finally:
            await store.close()


async def _play(store: stead.Store, clock: stead.FakeClock, amounts: list[int], limit: int,
                expires_in: int, effects: int, crash_after: set[int],
                outside: list[tuple[Any, ...]]) -> None:
    sent: list[int] = []
    violations: list[str] = []
    crashed: set[int] = set()
    app = stead.App("pay")

    async def pay(op: stead.Operation, index: int, amount: int) -> int:
        # The moment after the intent committed (nothing moves the clock or
        # the intent in between): the grant in force must cover the call.
        row = await store.latest_intent(op.run_id)
        intent = None if row is None else stead.Intent.loads(row.intent)
        grants = [] if intent is None else intent.grants_for("pay")
        if not any(not g.expired(clock.now()) and g.covers({"index": index, "amount": amount})
                   is None for g in grants):
            violations.append(f"payment {index} ({amount}) sent without a covering grant")
        if op.grant is None or op.grant.covers({"index": index, "amount": amount}) is not None:
            violations.append(f"payment {index} got {op.grant!r} as its grant")
        # And the budget in force allowed it: this send included, the journal
        # holds no more effect intents than the budget's effects.
        spent = [r for r in await store.load_journal(op.run_id)
                 if r.kind == "effect" and r.status == "intent"]
        budget = None if intent is None else intent.budget
        if budget is None or budget.effects is None or len(spent) > budget.effects:
            violations.append(f"payment {index} was the {len(spent)}th effect under {budget}")
        sent.append(index)
        return amount

    def settle(index: int) -> int:
        if index in crash_after and index not in crashed:
            crashed.add(index)
            raise Crash()
        return index

    @app.workflow()
    async def payments(run: stead.Run, amounts: list[int]) -> int:
        total = 0
        for index, amount in enumerate(amounts):
            total += await run.effect("pay", pay, index, amount=amount, tool="pay", cost=1)
            await run.step("settle", settle, index)
        return total

    client = stead.Client(store, app)
    info = await client.start(payments, amounts, intent=stead.Intent(
        goal="pay", budget=stead.Budget(effects=effects),
        grants=[stead.Grant("pay", {"max_amount": limit}, expires_in=expires_in)]))

    async def work() -> None:
        for _ in range(3):  # a crashed worker leaves the run leased: take it over
            await stead.Worker(app, store, stead.WorkerOptions(lease_seconds=LEASE)
                               ).run_until_idle()
            clock.advance(LEASE + 1)

    await work()
    for happening in outside:
        status = (await client.get(info.run_id)).status
        if happening[0] == "advance":
            clock.advance(happening[1])
        elif happening[0] == "renew" and status in ("paused", "running", "pending"):
            await client.renew_grant(info.run_id, "pay", expires_in=happening[1],
                                     scope={"max_amount": happening[2]}, widen=True,
                                     by="ops", why="property")
        elif happening[0] == "resume" and status == "paused":
            await client.resume(info.run_id, by="ops", why="more budget", intent=stead.Intent(
                goal="pay", budget=stead.Budget(effects=effects + happening[1]),
                grants=[stead.Grant("pay", {"max_amount": limit}, expires_in=expires_in)]))
        await work()

    assert violations == []
    assert len(sent) == len(set(sent)), f"a payment was sent twice: {sent}"
    journal = await client.journal(info.run_id)
    intents = [r for r in journal if r.kind == "effect" and r.status == "intent"]
    assert len(intents) == len(sent)  # what the budget counts is what was sent
    assert all(json.loads(r.payload)["cost"] == 1 for r in intents)
    final = await client.get(info.run_id)
    event(f"ended {final.status}, {len(sent)} of {len(amounts)} sent")
    if final.status == "completed":
        assert sorted(sent) == list(range(len(amounts)))


@settings(max_examples=stress.examples(100), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    amounts=st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=5),
    limit=st.integers(min_value=20, max_value=100),
    expires_in=st.integers(min_value=10, max_value=400),
    effects=st.integers(min_value=0, max_value=5),
    crash_after=st.sets(st.integers(min_value=0, max_value=4), max_size=3),
    outside=events,
)
# A person lowers the budget below what was spent: nothing more is sent.
@example(amounts=[0, 0], limit=20, expires_in=10, effects=0, crash_after=set(),
         outside=[("resume", 1), ("resume", 0)])
def test_no_effect_runs_without_a_covering_grant_and_no_budget_is_spent_twice(
    amounts: list[int], limit: int, expires_in: int, effects: int, crash_after: set[int],
    outside: list[tuple[Any, ...]],
) -> None:
    asyncio.run(scenario(amounts, limit, expires_in, effects, crash_after, outside))
