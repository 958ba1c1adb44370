"""A model-based test of the whole agent loop, on SQLite and PostgreSQL.

Hypothesis draws an agent loop (plans, steps, payments, waits for a person,
task-state changes) and the run's first intent (a grant to pay up to a limit
that expires, maybe a wall-clock budget), then plays random outside events
against it: time passing (grants expire, the budget runs out), policy changes,
the go-ahead a wait waits for, crashes (the attempt is abandoned mid-call and
a new `Worker` claims the run once its lease has expired on the injected
clock) and, on a paused run, the one operator decision its pause calls for
(resume, renew), or one that ends it (deny the grant, terminate).

Checked at the moment each call runs live, against the store and the policy
service as they are then:

- a payment is sent only under an unexpired `pay` grant in force that covers
  it, allowed by the policy now, and never twice (its key, its turn);
- no model call or step runs once every grant lapsed or the wall-clock budget
  is spent;
- after a plain crash (nothing changed but the worker) no acknowledged model
  answer or step is asked again;

and after every rule: a paused run's decision clears its pause (the same pause
never comes back from the same decision; a denial or termination ends it and
nothing is sent after), and every takeover that journaled anything has its
resume record, with the revalidation in it.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import stead
from tests import stress
from tests.helpers import Crash

LEASE = 30.0
HOUR = 3600.0
EXAMPLES = stress.examples(60)
STEPS = 15
TIMEOUT = 120.0
# A fresh plan is re-derived after a real change only once takeovers tell a
# change from a new intent version of the same content and from budget use;
# until then plans are plain recorded answers (a resume would otherwise
# re-ask a plan already acted on, and pause the run again for it).
FRESH = "on_resume" if hasattr(stead.Run, "propose") else None

names = itertools.count(1)
ran: Counter[str] = Counter()  # what the examples did, per store: printed at the end

# An agent's turn; waits are drawn as often as payments, so that the outside
# has moments to act between a run's live calls.
turns = st.lists(st.one_of(
    st.sampled_from([("plan",), ("step",), ("state",), ("wait",), ("wait",)]),
    st.tuples(st.just("pay"), st.integers(min_value=1, max_value=60)),
), min_size=2, max_size=10)


class Model:
    """The model: counts what it answered, and checks it may be asked."""

    name = "loop-model"

    def __init__(self, world: World) -> None:
        self.world = world

    async def complete(self, messages: Sequence[Mapping[str, Any]],
                       **params: Any) -> stead.Completion:
        turn = str(messages[-1]["content"])
        await self.world.live(f"plan-{turn}")
        return stead.Completion(text=f"next after {turn}", model=self.name)


class World:
    """Everything outside the run: the clock, the policy service, the payment
    ledger, what was asked, and the crash the next live call suffers."""

    def __init__(self, store: stead.Store, clock: stead.FakeClock, name: str) -> None:
        self.store, self.clock, self.name = store, clock, name
        self.limit, self.version = 100, "pay@1"
        self.paid: dict[str, int] = {}  # effect key -> turn
        self.done: Counter[str] = Counter()
        self.generation = 0  # moves on with every change a takeover may see
        self.at: dict[str, int] = {}  # call -> the generation it last ran in
        self.crash = False
        self.violations: list[str] = []
        self.run_id = ""

    def policy(self, intent: stead.Intent | None, state: dict[str, Any], run: Any,
               action: stead.Action | None) -> stead.Continue | stead.Pause:
        for grant in [] if intent is None else intent.grants_for("pay"):
            allowed = grant.scope.get("max_amount", math.inf)
            if allowed > self.limit:
                return stead.Pause(f"the limit is {self.limit}; the grant allows {allowed}",
                                   version=self.version)
        return stead.Continue(version=self.version)

    async def authority(self) -> tuple[stead.Intent | None, str | None]:
        """The intent in force now, and why the run may not act, if so."""
        row = await self.store.latest_intent(self.run_id)
        intent = None if row is None else stead.Intent.loads(row.intent)
        now = self.clock.now()
        grants = () if intent is None else intent.grants
        if not grants or all(g.expired(now) for g in grants):
            return intent, "every grant lapsed"
        budget = None if intent is None else intent.budget
        created = (await self.store.get_run(self.run_id)).created_at
        if budget is not None and budget.seconds is not None \
                and now - created >= budget.seconds:
            return intent, "the wall-clock budget is spent"
        return intent, None

    async def live(self, call: str) -> None:
        """A model call or step runs live now: may it, and is it asked again
        after nothing but a crash?"""
        if self.crash:
            self.crash = False
            raise Crash()
        _, lapsed = await self.authority()
        if lapsed is not None:
            self.violations.append(f"{call} ran live although {lapsed}")
        if self.done[call] and self.at[call] == self.generation:
            self.violations.append(f"{call} was asked again after a plain crash")
        self.done[call] += 1
        self.at[call] = self.generation
        ran[f"{self.name} live model calls and steps"] += 1

    async def look(self, turn: int) -> int:
        await self.live(f"look-{turn}")
        return turn

    async def pay(self, op: stead.Operation, turn: int, amount: int) -> int:
        if self.crash:  # mid-send, before anything reached the payment service
            self.crash = False
            raise Crash()
        intent, lapsed = await self.authority()
        now = self.clock.now()
        if lapsed is not None:
            self.violations.append(f"payment {turn} sent although {lapsed}")
        covering = [g for g in ([] if intent is None else intent.grants_for("pay"))
                    if not g.expired(now) and g.covers({"turn": turn, "amount": amount}) is None]
        if not covering:
            self.violations.append(f"payment {turn} ({amount}) sent without a covering grant")
        if amount > self.limit or any(g.scope.get("max_amount", math.inf) > self.limit
                                      for g in covering):
            self.violations.append(f"payment {turn} ({amount}) sent over the limit "
                                   f"{self.limit} of {self.version}")
        if op.key in self.paid or turn in self.paid.values():
            self.violations.append(f"payment {turn} sent twice (key {op.key})")
        self.paid[op.key] = turn
        ran[f"{self.name} payments"] += 1
        return amount


class LoopMachine(RuleBasedStateMachine):
    """One run of an agent loop per example, in a store of its own clock."""

    url = ""
    store_name = ""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = stead.FakeClock()
        self.store = self.loop.run_until_complete(stead.open_store(self.url, clock=self.clock,
                                                                      lease_clock=self.clock))
        self.world = World(self.store, self.clock, self.store_name)
        self.app = stead.App("loop", policy=self.world.policy, policy_version="pay@1",
                             tools=["pay"])
        self.client = stead.Client(self.store, self.app)
        self.status = ""
        self.error: dict[str, Any] | None = None
        self.ended_with: int | None = None  # what was paid when a person ended the run
        ran[f"{self.store_name} examples"] += 1

    def teardown(self) -> None:
        try:
            if self.world.run_id and self.status in ("running", "pending", "waiting"):
                self.loop.run_until_complete(self.client.cancel(self.world.run_id))
        finally:
            self.loop.run_until_complete(self.store.close())
            self.loop.close()

    def _do(self, coro: Any) -> Any:
        ran[f"{self.store_name} calls to stead"] += 1
        # Nothing here waits on real time: a call that does not return is a
        # worker waiting for a lease the injected clock never ends; fail, not hang.
        return self.loop.run_until_complete(asyncio.wait_for(coro, TIMEOUT))

    # -- the loop ----------------------------------------------------------------------
    @initialize(loop=turns, expires_in=st.integers(min_value=30, max_value=2000),
                limit=st.integers(min_value=20, max_value=100),
                seconds=st.none() | st.integers(min_value=60, max_value=3000),
                crash=st.booleans())
    def start(self, loop: list[tuple[Any, ...]], expires_in: int, limit: int,
              seconds: int | None, crash: bool) -> None:
        world = self.world
        world.crash = crash
        name = f"loop_{next(names)}"  # a workflow of its own: runs of other examples stay put

        @self.app.workflow(name=name)
        async def agent(run: stead.Run, turns: list[list[Any]]) -> int:
            for i, turn in enumerate(turns):
                if turn[0] == "plan":
                    await run.llm(f"plan-{i}", Model(world), [{"role": "user", "content": str(i)}],
                                  fresh=FRESH, reason="the next action")
                elif turn[0] == "step":
                    await run.step(f"look-{i}", world.look, i)
                elif turn[0] == "pay":
                    await run.effect(f"pay-{i}", world.pay, i, amount=turn[1], tool="pay",
                                     idempotent=True, reason="the loop pays")
                elif turn[0] == "wait":
                    await (await run.wait("go", token=False))
                else:
                    facts = await run.state.get()
                    await run.state.update({"turn": i}, expect_version=facts.version)
            return len(turns)

        intent = stead.Intent(
            goal="pay what the loop decides", grants=[
                stead.Grant("pay", {"max_amount": limit}, policy="pay@1", expires_in=expires_in)],
            budget=None if seconds is None else stead.Budget(seconds=seconds))
        info = self._do(self.client.start(agent, [list(t) for t in loop], intent=intent))
        world.run_id = info.run_id
        self._work()

    def _work(self) -> None:
        """Let a new worker run the run as far as it goes; if its attempt was
        abandoned by a crash, the lease expires and the next one takes over."""
        async def go() -> None:
            await stead.Worker(self.app, self.store, stead.WorkerOptions(
                lease_seconds=LEASE)).run_until_idle()
            info = await self.client.get(self.world.run_id)
            if info.lease_owner is not None:  # abandoned mid-call: a plain crash
                ran[f"{self.store_name} takeovers after a crash"] += 1
                if await self._expiring(LEASE + 1):
                    self.world.generation += 1
                self.clock.advance(LEASE + 1)
                await stead.Worker(self.app, self.store, stead.WorkerOptions(
                    lease_seconds=LEASE)).run_until_idle()
            info = await self.client.get(self.world.run_id)
            self.status, self.error = str(info.status), info.error
            if self.status == "paused" and self.error is not None:
                ran[f"{self.store_name} paused ({self.error.get('cause')})"] += 1
            ran[f"{self.store_name} {self.status}"] += 1

        self._do(go())
        assert self.world.violations == [], self.world.violations

    async def _expiring(self, seconds: float) -> bool:
        """Whether moving the clock by `seconds` lets a grant expire or spends
        the budget: what a takeover then sees has changed."""
        row = await self.store.latest_intent(self.world.run_id)
        if row is None:
            return False
        current, now = stead.Intent.loads(row.intent), self.clock.now()
        crossed = [g.expires_at for g in current.grants if g.expires_at is not None]
        if current.budget is not None and current.budget.seconds is not None:
            created = (await self.store.get_run(self.world.run_id)).created_at
            crossed.append(created + current.budget.seconds)
        return any(now < at <= now + seconds for at in crossed)

    # -- the outside -------------------------------------------------------------------
    @precondition(lambda self: not self.world.crash
                  and self.status in ("running", "pending", "waiting", "paused"))
    @rule()
    def crash_next(self) -> None:
        """The worker that next runs a live call dies in it."""
        self.world.crash = True

    @rule(seconds=st.integers(min_value=1, max_value=1500))
    def time_passes(self, seconds: int) -> None:
        if self._do(self._expiring(seconds)):
            self.world.generation += 1
        self.clock.advance(seconds)

    @rule(limit=st.integers(min_value=10, max_value=120))
    def policy_changes(self, limit: int) -> None:
        self.world.generation += 1
        self.world.limit = limit
        self.world.version = f"pay@{int(self.world.version.split('@')[1]) + 1}"

    @precondition(lambda self: self.status == "waiting")
    @rule()
    def go_ahead(self) -> None:
        delivery = self._do(self.client.deliver(
            self.world.run_id, kind="go", event_id=f"go-{next(names)}", payload={}))
        assert isinstance(delivery, stead.Accepted), delivery
        self._work()

    @precondition(lambda self: self.status in ("running", "pending", "waiting"))
    @rule()
    def work(self) -> None:
        self._work()

    # -- the operator ------------------------------------------------------------------
    @precondition(lambda self: self.status == "paused")
    @rule(terminate=st.booleans())
    def decide(self, terminate: bool) -> None:
        """The one decision this pause calls for; or the operator ends it (a
        lapsed or refused grant by denying it, anything else by terminating)."""
        world, run_id, error = self.world, self.world.run_id, self.error or {}
        world.generation += 1
        if terminate or not self._decide(error):
            if error.get("cause") in ("grants", "grant") and error.get("grant", "pay") == "pay":
                self._do(self.client.deny_grant(run_id, "pay", by="ops", why="denied"))
            else:
                self._do(self.client.terminate(run_id, by="ops", why="the model test ends it"))
            self._work()
            assert self.status == "revalidation_failed", (self.status, self.error)
            self.ended_with = len(world.paid)
            return
        self._work()
        if self.status == "paused" and self.error is not None:
            assert self.error.get("message") != error.get("message"), (
                f"the same pause came back after its decision: {self.error}")

    def _decide(self, error: Mapping[str, Any]) -> bool:
        """Make the decision the pause asks for; False if none can help."""
        run_id, limit = self.world.run_id, self.world.limit
        intent = stead.Intent.loads(self._do(self.client.intents(run_id))[-1].intent)
        grant = intent.grants_for("pay")[0] if intent.grants_for("pay") else None
        cause = error.get("cause")
        if grant is None:
            return False
        allowed = grant.scope.get("max_amount", math.inf)
        if cause == "grant" and error.get("arguments", {}).get("amount", 0) > limit:
            return False  # the payment is over the policy's limit: nothing can allow it
        if cause in ("grants", "grant"):
            self._do(self.client.renew_grant(
                run_id, "pay", expires_in=HOUR, scope={"max_amount": min(limit, max(
                    allowed, error.get("arguments", {}).get("amount", 0)))},
                widen=True, by="ops", why="renewed by the model test"))
            return True
        budget = intent.budget
        if cause == "budget" and budget is not None and budget.seconds is not None:
            budget = stead.Budget(seconds=budget.seconds + 10 * HOUR)
        narrowed = stead.Grant("pay", {"max_amount": min(allowed, limit)},
                               policy=self.world.version, expires_at=grant.expires_at)
        self._do(self.client.resume(run_id, by="ops", why="decided by the model test",
                                    intent=stead.Intent(goal=intent.goal, grants=[narrowed],
                                                        budget=budget)))
        return True

    # -- after every rule --------------------------------------------------------------
    @invariant()
    def every_takeover_has_its_record(self) -> None:
        if not self.world.run_id:
            return
        journal = self._do(self.client.journal(self.world.run_id))
        resumes = {r.epoch: r for r in self._do(self.client.resumes(self.world.run_id))}
        for epoch in sorted({r.epoch for r in journal} - {1}):
            assert epoch in resumes, f"epoch {epoch} journaled without its resume record"
            record = resumes[epoch]
            assert record.from_seq <= len(journal) and record.reused <= record.from_seq
            revalidation = record.details.intent or {}
            assert "decision" in revalidation and "diff" in revalidation, record.detail

    @invariant()
    def the_run_only_ever_stops_for_a_person_or_ends_well(self) -> None:
        assert self.status in ("", "running", "pending", "waiting", "paused", "completed",
                               "revalidation_failed"), (self.status, self.error)

    @invariant()
    def nothing_is_sent_after_a_person_ended_the_run(self) -> None:
        if self.ended_with is not None:
            assert self.status == "revalidation_failed"
            assert len(self.world.paid) == self.ended_with

    @invariant()
    def nothing_spent_twice(self) -> None:
        paid = list(self.world.paid.values())
        assert len(paid) == len(set(paid)), paid


def test_random_agent_loops_keep_the_loops_promises(db_url: str, backend: str) -> None:
    LoopMachine.url, LoopMachine.store_name = db_url, backend
    LoopMachine.TestCase.settings = settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    before = ran[f"{backend} examples"]
    LoopMachine.TestCase().runTest()
    print(f"\n{backend}: {ran[f'{backend} examples'] - before} examples; "
          + ", ".join(f"{k.removeprefix(backend + ' ')} {v}" for k, v in sorted(ran.items())
                      if k.startswith(backend)))
