"""Property: a run crashed at random journal positions, any number of times,
converges to the result of an uninterrupted run.

Hypothesis generates small workflow *programs*: a list of operations, each a
step (async with a random number of `asyncio.sleep(0)`, or sync in a thread),
a recorded value (`run.now()`, `run.uuid()`, `run.random()`), or an
`asyncio.gather` of 2-4 branches, each a short sequence that may hold one more
level of gather. One registered workflow interprets any program, so every
example runs real stead code end to end on a real SQLite file.

A "crash" is in-process: a store wrapper raises `Crash` (a BaseException, so
nothing in stead or the workflow handles it) at the K-th journal write of a
worker, either before the transaction (nothing written) or after it
(committed, but the process died before hearing so). From then on the dead
worker's store refuses everything and its step functions refuse to run; its
leftover tasks are cancelled. A fresh store object and a fresh Worker take the
run over once the (fake-clock) lease has expired.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import dataclasses
import datetime as dt
import functools
import hashlib
import json
import random
import tempfile
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stead
from stead.records import Record, ResumeRecord
from tests import stress

T = TypeVar("T")
LEASE = 30.0


class Crash(BaseException):
    """The process died. Not an Exception: neither stead nor workflow code handles it."""


# -- the attempt a piece of code belongs to (a contextvar, so a dead worker's
#    leftover tasks still know they are dead) ----------------------------------
@dataclasses.dataclass
class Attempt:
    rng: random.Random
    counts: Counter[str] = dataclasses.field(default_factory=Counter)
    dead: bool = False

    def check(self) -> None:
        if self.dead:
            raise Crash()


ATTEMPT: contextvars.ContextVar[Attempt] = contextvars.ContextVar("attempt")


def _value(name: str, x: int) -> int:
    """A step's result: a deterministic function of its inputs."""
    return int(hashlib.sha256(f"{name}:{x}".encode()).hexdigest()[:8], 16) % 1_000_003


async def async_step(name: str, x: int) -> int:
    att = ATTEMPT.get()
    att.check()
    att.counts[name] += 1
    for _ in range(att.rng.randint(0, 4)):
        await asyncio.sleep(0)
        att.check()
    return _value(name, x)


def sync_step(name: str, x: int) -> int:
    att = ATTEMPT.get()
    att.check()
    att.counts[name] += 1
    return _value(name, x)


# -- the interpreter: one workflow runs any generated program ------------------
APP = stead.App("properties")


async def _interpret(run: stead.Run, items: Sequence[dict[str, Any]], prev: int) -> list[Any]:
    out: list[Any] = []
    for item in items:
        op = item["op"]
        if op == "step":
            fn = async_step if item["async"] else sync_step
            prev = await run.step(item["name"], fn, item["name"], prev)
            out.append(["step", item["name"], prev])
        elif op == "now":
            out.append(["now", run.now().isoformat()])
        elif op == "uuid":
            out.append(["uuid", str(run.uuid())])
        elif op == "random":
            out.append(["random", run.random()])
        else:
            assert op == "gather"
            branches = await asyncio.gather(
                *(_interpret(run, b, prev) for b in item["branches"])
            )
            out.append(["gather", list(branches)])
    return out


@APP.workflow(name="program", version=1)
async def program_wf(run: stead.Run, program: list[dict[str, Any]]) -> list[Any]:
    return await _interpret(run, program, 0)


# -- programs ------------------------------------------------------------------
_step = st.booleans().map(lambda a: {"op": "step", "async": a})
_recorded = st.sampled_from(["now", "uuid", "random"]).map(lambda k: {"op": k})
_leaf = st.one_of(_step, _step, _step, _recorded)


def _gather(branch: st.SearchStrategy[list[dict[str, Any]]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.lists(branch, min_size=2, max_size=4).map(
        lambda bs: {"op": "gather", "branches": bs}
    )


_inner_branch = st.lists(_leaf, min_size=1, max_size=3)
_outer_branch = st.lists(st.one_of(_leaf, _leaf, _gather(_inner_branch)), min_size=1, max_size=3)
_programs = st.lists(st.one_of(_leaf, _leaf, _gather(_outer_branch)), min_size=1, max_size=6)


def _named(program: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give every step a unique name, in program order."""
    program = copy.deepcopy(program)
    counter = iter(range(10_000))

    def walk(items: list[dict[str, Any]]) -> None:
        for it in items:
            if it["op"] == "step":
                it["name"] = f"s{next(counter)}"
            elif it["op"] == "gather":
                for b in it["branches"]:
                    walk(b)

    walk(program)
    return program


def _expected(items: Sequence[dict[str, Any]], path: str = "") -> list[Any]:
    """The result's shape with each call's journal address, per the address
    scheme: calls numbered per branch, child branches `b<i>.` in creation order."""
    calls = children = 0
    out: list[Any] = []
    for it in items:
        if it["op"] == "gather":
            subs = []
            for b in it["branches"]:
                subs.append(_expected(b, f"{path}b{children}."))
                children += 1
            out.append(["gather", subs])
        else:
            out.append([it["op"], f"{path}{calls}"])
            calls += 1
    return out


def _shape(result: list[Any]) -> list[Any]:
    """The result with recorded values (now/uuid/random) blanked out."""
    out: list[Any] = []
    for entry in result:
        if entry[0] == "gather":
            out.append(["gather", [_shape(b) for b in entry[1]]])
        elif entry[0] == "step":
            out.append(entry)
        else:
            out.append([entry[0], None])
    return out


def _count_steps(items: Sequence[dict[str, Any]]) -> int:
    n = 0
    for it in items:
        if it["op"] == "step":
            n += 1
        elif it["op"] == "gather":
            n += sum(_count_steps(b) for b in it["branches"])
    return n


# -- the crash ------------------------------------------------------------------
class CrashingStore:
    """Delegates to a real store until its `crash_at`-th journal write (append or
    finish), where the process "dies": before the transaction, or just after it
    committed. From then on every call raises `Crash`.

    A proxy rather than a `Store` subclass, so methods the interface gains later
    are delegated (and refused once dead) without touching this file."""

    _JOURNAL_WRITES = frozenset({"append", "finish"})
    _ALWAYS = frozenset({"open", "close"})

    def __init__(self, inner: stead.Store, attempt: Attempt, crash_at: int | None,
                 after: bool) -> None:
        self.inner = inner
        self.attempt = attempt
        self.crash_at = crash_at
        self.after = after
        self.writes = 0

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if not callable(target) or name in self._ALWAYS:
            return target
        if name in self._JOURNAL_WRITES:
            return functools.partial(self._journal_write, target)
        return functools.partial(self._live, target)

    def _crash(self) -> None:
        self.attempt.dead = True
        raise Crash()

    async def _live(self, call: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        self.attempt.check()
        return await call(*args, **kwargs)

    async def _journal_write(self, call: Callable[..., Awaitable[None]], *args: Any,
                             **kwargs: Any) -> None:
        self.attempt.check()
        self.writes += 1
        hit = self.writes == self.crash_at
        if hit and not self.after:
            self._crash()
        await call(*args, **kwargs)
        if hit and self.after:
            self._crash()


def _ignore_crashes(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # The dead worker's run task ends with Crash and nobody awaits it: that is
    # the point. Anything else is reported as usual.
    if not isinstance(context.get("exception"), Crash):
        loop.default_exception_handler(context)


async def _kill_leftovers() -> None:
    """A dead process runs nothing: cancel the tasks the dead worker left behind
    (gather branches still waiting for their turn)."""
    me = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() if t is not me]
    for t in left:
        t.cancel()
    await asyncio.gather(*left, return_exceptions=True)


# -- one example ----------------------------------------------------------------
@dataclasses.dataclass
class Outcome:
    reference: list[Any]
    reference_counts: Counter[str]
    result: list[Any]
    journal: list[Record]
    resumes: list[ResumeRecord]
    snapshots: list[list[Record]]  # the journal as each crashed attempt left it
    attempts: list[tuple[int, Attempt]]  # (epoch, attempt)
    status: str


async def _attempt(url: str, clock: stead.FakeClock, att: Attempt,
                   crash_at: int | None, after: bool) -> bool:
    """One worker's life on a fresh store object. True if it crashed."""
    inner = await stead.open_store(url, clock=clock, lease_clock=clock)
    store: Any = CrashingStore(inner, att, crash_at, after)
    worker = stead.Worker(APP, store, stead.WorkerOptions(lease_seconds=LEASE))
    token = ATTEMPT.set(att)
    crashed = False
    try:
        await worker.run_until_idle()
    except Crash:
        crashed = True
        await _kill_leftovers()
    finally:
        ATTEMPT.reset(token)
        await inner.close()
    return crashed


async def _scenario(program: list[dict[str, Any]], seed: int,
                    crashes: list[tuple[int, bool]]) -> Outcome:
    asyncio.get_running_loop().set_exception_handler(_ignore_crashes)
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/props.db"
        clock = stead.FakeClock()
        reader = await stead.open_store(url, clock=clock, lease_clock=clock)
        try:
            client = stead.Client(reader, APP)

            # The reference: the same program, never interrupted.
            ref_att = Attempt(random.Random(rng.random()))
            ref = await client.start(program_wf, program)
            assert not await _attempt(url, clock, ref_att, None, False)
            reference = await client.result(ref.run_id, timeout=10)

            info = await client.start(program_wf, program)
            attempts: list[tuple[int, Attempt]] = []
            snapshots: list[list[Record]] = []
            for crash_at, after in [*crashes, (None, False)]:
                att = Attempt(random.Random(rng.random()))
                crashed = await _attempt(url, clock, att, crash_at, after)
                row = await client.get(info.run_id)
                attempts.append((row.epoch, att))
                if row.status == "completed":
                    break
                assert crashed, f"an uncrashed worker left the run {row.status}"
                assert row.status == "running"
                snapshots.append(await client.journal(info.run_id))
                clock.advance(LEASE + 1)  # the dead worker's lease expires

            final = await client.get(info.run_id)
            return Outcome(
                reference=reference, reference_counts=ref_att.counts,
                result=final.result, journal=await client.journal(info.run_id),
                resumes=await client.resumes(info.run_id), snapshots=snapshots,
                attempts=attempts, status=final.status,
            )
        finally:
            await reader.close()


# -- checks ---------------------------------------------------------------------
def _check_values(result: list[Any], expected: list[Any], by_addr: dict[str, Record],
                  seen: set[str]) -> None:
    """Every result entry is the value journaled at its address."""
    assert len(result) == len(expected)
    for got, want in zip(result, expected, strict=True):
        assert got[0] == want[0]
        if got[0] == "gather":
            assert len(got[1]) == len(want[1])
            for g, w in zip(got[1], want[1], strict=True):
                _check_values(g, w, by_addr, seen)
            continue
        addr = want[1]
        rec = by_addr[addr]
        seen.add(addr)
        assert rec.kind == got[0] and rec.status == "ok"
        payload = json.loads(rec.payload)
        if got[0] == "step":
            assert rec.name == got[1] and payload == got[2]
        elif got[0] == "now":
            assert dt.datetime.fromisoformat(payload).isoformat() == got[1]
        elif got[0] == "uuid":
            assert str(uuid.UUID(payload)) == got[1]
        else:
            assert payload == got[1]


def _check(program: list[dict[str, Any]], out: Outcome) -> None:
    steps = _count_steps(program)
    assert out.status == "completed"

    # The uninterrupted run: every step ran exactly once.
    assert sum(out.reference_counts.values()) == steps
    assert set(out.reference_counts.values()) <= {1}

    # Converges: same shape and same step results as the uninterrupted run.
    assert _shape(out.result) == _shape(out.reference)

    # The journal is gapless, holds one record per call at the address the
    # scheme predicts, and every value in the result is the journaled one.
    journal = out.journal
    assert [r.seq for r in journal] == list(range(len(journal)))
    # A step's started marker rides along with a commit made while it runs
    # (a sibling branch's): an attempt that died in flight then counts, and
    # the next one numbers after it; one that did not die ends in its attempt.
    calls = [r for r in journal if r.status != "started"]
    for marker in (r for r in journal if r.status == "started"):
        [outcome] = [r for r in calls if r.addr == marker.addr]
        assert (outcome.attempt == marker.attempt and outcome.epoch == marker.epoch) or (
            outcome.attempt > marker.attempt and outcome.epoch > marker.epoch), (marker, outcome)
    by_addr = {r.addr: r for r in calls}
    assert len(by_addr) == len(calls), "two records at one address"
    seen: set[str] = set()
    _check_values(out.result, _expected(program), by_addr, seen)
    assert seen == set(by_addr), "records no call asked for"

    # Append-only: what a crashed attempt left behind is kept, record for record
    # (so a committed now/uuid/random is what the final result holds).
    for snap in out.snapshots:
        assert journal[: len(snap)] == snap

    # Epochs: one claim per attempt, and records are stamped with the attempt
    # that wrote them.
    epochs = [e for e, _ in out.attempts]
    assert epochs == list(range(1, len(epochs) + 1))
    assert all(r.epoch in epochs for r in journal)
    assert [r.epoch for r in journal] == sorted(r.epoch for r in journal)

    # Exactly once for what committed: a step whose record committed at epoch e
    # ran once in attempt e and never again; before e it ran at most once per
    # attempt (a run whose record the crash lost).
    for rec in calls:
        if rec.kind != "step":
            continue
        for epoch, att in out.attempts:
            ran = att.counts[rec.name]
            if epoch == rec.epoch:
                assert ran == 1, f"{rec.name} ran {ran}x in the attempt that journaled it"
            elif epoch > rec.epoch:
                assert ran == 0, f"{rec.name} re-ran at epoch {epoch} after its record committed"
            else:
                assert ran <= 1
    assert sum(1 for r in calls if r.kind == "step") == steps

    # One resume record per takeover that wrote anything, written with its
    # first write: it starts where the previous attempts' records end.
    by_epoch = {r.epoch: r for r in out.resumes}
    assert len(by_epoch) == len(out.resumes)
    writers = {r.epoch for r in journal if r.epoch > 1}
    last = epochs[-1]
    if last > 1:
        writers.add(last)  # the finishing write
    assert set(by_epoch) == writers
    for res in out.resumes:
        assert res.code_version == "program@1"
        assert res.from_seq == sum(1 for r in journal if r.epoch < res.epoch)
        assert 0 <= res.reused <= res.from_seq


# -- the properties -------------------------------------------------------------
@settings(max_examples=stress.examples(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(program=_programs.map(_named), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_crashed_runs_converge_to_the_uninterrupted_result(
    program: list[dict[str, Any]], seed: int, data: st.DataObject
) -> None:
    writes = _count_steps(program) + 1  # one commit per step, plus the finish
    crashes = data.draw(
        st.lists(st.tuples(st.integers(1, writes), st.booleans()), min_size=1, max_size=4),
        label="crashes (K-th write, after the commit?)",
    )
    out = asyncio.run(_scenario(program, seed, crashes))
    _check(program, out)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=_programs.map(_named), seed=st.integers(0, 2**32 - 1))
def test_a_crash_at_every_write_still_converges(
    program: list[dict[str, Any]], seed: int
) -> None:
    """The worst case: every worker dies at its very first write, alternately
    before and after the commit, until the run has been taken over more times
    than it has writes."""
    writes = _count_steps(program) + 1
    crashes = [(1, i % 2 == 1) for i in range(2 * writes)]
    out = asyncio.run(_scenario(program, seed, crashes))
    _check(program, out)


async def _forked(program: list[dict[str, Any]], seed: int, fraction: float
                  ) -> tuple[list[Any], list[Any], list[Record], list[Record], Counter[str]]:
    """Run `program` to its end, fork it at `fraction` of its journal and run
    the fork: (reference result, fork result, reference journal, fork
    journal, the steps the fork ran)."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as folder:
        store = await stead.open_store(f"sqlite:///{folder}/forks.db")
        try:
            client = stead.Client(store, APP)
            ref = await client.start(program_wf, program)
            token = ATTEMPT.set(Attempt(random.Random(rng.random())))
            try:
                await stead.Worker(APP, store).run_until_idle()
            finally:
                ATTEMPT.reset(token)
            journal = await client.journal(ref.run_id)
            fork = await client.fork(ref.run_id, at=round(fraction * len(journal)))
            att = Attempt(random.Random(rng.random()))
            token = ATTEMPT.set(att)
            try:
                await stead.Worker(APP, store).run_until_idle()
            finally:
                ATTEMPT.reset(token)
            return (await client.result(ref.run_id, timeout=10),
                    await client.result(fork.run_id, timeout=10), journal,
                    await client.journal(fork.run_id), att.counts)
        finally:
            await store.close()


@settings(max_examples=stress.examples(40), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(program=_programs.map(_named), seed=st.integers(0, 2**32 - 1),
       fraction=st.floats(0, 1))
def test_a_fork_anywhere_finishes_like_the_run_it_came_from(
    program: list[dict[str, Any]], seed: int, fraction: float
) -> None:
    """A fork replays its prefix (the values recorded there are the parent's,
    the steps acknowledged there do not run again) and runs the rest live."""
    reference, result, journal, forked, ran = asyncio.run(_forked(program, seed, fraction))
    assert _shape(result) == _shape(reference)
    at = round(fraction * len(journal))
    # The prefix is the parent's, record for record; a started marker whose
    # outcome lies past it becomes a cut of nothing (the attempt did not die).
    for mine, theirs in zip(forked[:at], journal[:at], strict=True):
        if mine.kind == "cut":
            assert theirs.status == "started" and mine.seq == theirs.seq
        else:
            assert mine == theirs
    acknowledged = {r.name for r in journal[:at] if r.kind == "step" and r.status == "ok"}
    assert not acknowledged & set(ran), "a step acknowledged in the prefix ran again"
    assert set(ran) == {r.name for r in forked if r.kind == "step" and r.status == "ok"
                        } - acknowledged
    by_addr = {r.addr: r for r in forked if r.status != "started" and r.kind != "cut"}
    seen: set[str] = set()
    _check_values(result, _expected(program), by_addr, seen)
    for r in journal[:at]:  # what the prefix recorded is what the fork returns
        if r.status == "ok" and r.kind != "cut":
            assert by_addr[r.addr].payload == r.payload


async def test_a_value_recorded_while_a_write_is_in_flight_is_journaled(
    db_url: str,
) -> None:
    """Regression (found by the property above): `run.now()` called in one branch
    while another branch's commit was in flight was dropped from the buffer
    when that commit returned, so the run used a value the journal never held
    (and a replay would have drawn a different one)."""
    app = stead.App("t")

    async def quick() -> int:  # returns without yielding: its commit starts at once
        return 1

    @app.workflow()
    async def wf(run: stead.Run) -> list[Any]:
        async def stamp() -> str:
            return run.now().isoformat()

        return list(await asyncio.gather(run.step("quick", quick), stamp()))

    clock = stead.FakeClock()
    store = await stead.open_store(db_url, clock=clock, lease_clock=clock)
    try:
        client = stead.Client(store, app)
        info = await client.start(wf)
        await stead.Worker(app, store).run_until_idle()
        result = await client.result(info.run_id, timeout=10)
        journal = await client.journal(info.run_id)
        assert sorted(r.kind for r in journal) == ["now", "step"]
        assert [r.seq for r in journal] == [0, 1]
        (now,) = [r for r in journal if r.kind == "now"]
        assert json.loads(now.payload) == result[1]
    finally:
        await store.close()
