"""The crash harness (`stead.testing`), then real worker processes SIGKILLed at
chosen points and resumed by a fresh one.

Each test owns a database, a step counter file and a model-call log; the worker
script (tests/workers/crash_worker.py) writes to them. What must hold after the
fresh worker has finished the run:

- the run completes with the result of an uninterrupted run;
- a step whose record had committed before the crash ran exactly once; one
  whose record had not committed ran exactly once more in the fresh worker;
- the model is never asked again for an answer the journal acknowledged;
- the journal kept what had committed, unchanged, and its seqs are gapless;
- the takeover left one resume record: epoch 2, from the crash position,
  every journaled record reused.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import stead
import stead.testing
from stead.records import Fence, NewRun, Record
from stead.testing import CrashingStore, CrashPoint, DelegatingStore
from tests.workers.procs import KILLED, SLOW, Workers, check_journal, wait_until

# Process-level, crash or long property tests: `pytest --full` (CI) runs them.
pytestmark = pytest.mark.slow

STEPS = ("fetch", "plan", "part0", "part1", "part2", "combine")


# -- the harness, in-process ----------------------------------------------------
class Crashed(BaseException):
    """Raised instead of SIGKILL, so the harness can be checked in-process."""


def _crash() -> None:
    raise Crashed()


def _rec(seq: int, name: str) -> Record:
    return Record(seq=seq, addr=str(seq), attempt=1, kind="step", name=name, digest="d",
                  status="ok", payload="1", epoch=1, at=0.0)


async def _held_run(store: stead.Store) -> Fence:
    await store.create_run(NewRun("r1", "wf", 1, None, '{"args":[],"kwargs":{}}'))
    [row] = await store.claim("w1", ["wf@1"], 30.0, 1)
    return Fence("r1", row.epoch, "w1")


def test_stead_testing_exports_exactly_the_harness() -> None:
    assert set(stead.testing.__all__) == {
        "CrashPoint", "CrashingStore", "DelegatingStore", "kill_process",
        "crash_matrix", "Event", "Services", "Waiting", "Point", "MatrixReport", "PointResult",
        "EffectCalls", "stale_worker", "StaleWorker", "Boundary",
        # dry replays of exported histories (stead.testing.replays)
        "assert_replays", "check_migration", "check_migration_async", "load_exports",
        "replay_check",
    }
    for name in stead.testing.__all__:
        assert hasattr(stead.testing, name)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({}, "exactly one"), ({"before_commit": 1, "after_commit": 1}, "exactly one"),
     ({"after_commit": 0}, "from 1")],
)
def test_a_crash_point_names_exactly_one_write(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CrashPoint(**kwargs)


@pytest.mark.parametrize(("point", "durable"), [
    (CrashPoint(before_commit=2), ["a"]),
    (CrashPoint(after_commit=2), ["a", "b"]),
    (CrashPoint(before_commit=1, name="b"), ["a"]),
    (CrashPoint(after_commit=1, name="b"), ["a", "b"]),
])
async def test_the_crash_comes_before_or_after_the_chosen_write_commits(
    db_url: str, point: CrashPoint, durable: list[str]
) -> None:
    inner = await stead.open_store(db_url)
    try:
        fence = await _held_run(inner)
        store = CrashingStore(inner, point, crash=_crash)
        await store.append(fence, [_rec(0, "a")])
        with pytest.raises(Crashed):
            await store.append(fence, [_rec(1, "b")])
        assert [r.name for r in await inner.load_journal("r1")] == durable
        assert store.writes == (2 if point.name is None else 1)
    finally:
        await inner.close()


async def test_the_write_that_ends_the_run_counts_too(store: stead.Store) -> None:
    fence = await _held_run(store)
    crashing = CrashingStore(store, CrashPoint(before_commit=2), crash=_crash)
    await crashing.append(fence, [_rec(0, "a")])
    with pytest.raises(Crashed):
        await crashing.finish(fence, "completed", result="1")
    assert (await store.get_run("r1")).status == "running"


async def test_a_delegating_store_serves_a_worker(store: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run, x: int) -> int:
        return await run.step("double", lambda v: v * 2, x)

    wrapped = DelegatingStore(store)
    info = await stead.Client(wrapped, app).start(wf, 21)
    await stead.Worker(app, wrapped).run_until_idle()
    assert await stead.Client(store).result(info.run_id, timeout=SLOW) == 42
    assert wrapped.commits == store.commits > 0


async def test_a_delegating_store_that_watches_claim_sees_a_workers_plain_claims(
        store: stead.Store) -> None:
    """A worker's plain claim is `claim_unshared`: a subclass that overrides
    `claim` (to watch or fault it) still sees each one, made of its own
    `ready_tenants` and `claim`; one that does not delegates it whole."""
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run, x: int) -> int:
        return x

    took: list[str] = []

    class Watching(DelegatingStore):
        async def claim(self, *args: Any, **kwargs: Any) -> list[stead.RunRow]:
            rows = await self.inner.claim(*args, **kwargs)
            took.extend(r.run_id for r in rows)
            return rows

    watching = Watching(store)
    info = await stead.Client(watching, app).start(wf, 1)
    await stead.Worker(app, watching).run_until_idle()
    assert took == [info.run_id]
    other = await stead.Client(store, app).start(wf, 2, tenant="b")
    mine = await stead.Client(store, app).start(wf, 3, tenant="c")
    got = await watching.claim_unshared("w", app.hosted(), 30.0, 5)
    assert (got.tenants, got.runs) == (["b", "c"], [])  # several: no plain claim
    assert took == [info.run_id]
    whole = await DelegatingStore(store).claim_unshared("w", app.hosted(), 30.0, 5)
    assert (whole.tenants, whole.runs) == (["b", "c"], [])
    assert {(await store.get_run(r.run_id)).status for r in (other, mine)} == {"pending"}


# -- real processes -------------------------------------------------------------


@pytest.fixture
async def store(workers: Workers) -> AsyncIterator[stead.Store]:
    s = await stead.open_store(workers.db_url)
    yield s
    await s.close()


@dataclasses.dataclass(frozen=True)
class Baseline:
    result: Any
    records: int


async def _uninterrupted(tmp: Path) -> Baseline:
    workers = Workers(tmp)
    store = await stead.open_store(workers.db_url)
    try:
        info = await stead.Client(store).start("pipeline", 4, version=1)
        workers.open_gate()
        proc = workers.start("--until-done")
        assert await workers.exit_code(proc) == 0, workers.output(proc)
        row = await store.get_run(info.run_id)
        assert row.status == "completed", row
        assert workers.step_names(info.run_id) == {s: 1 for s in STEPS if s != "plan"}
        assert workers.model_calls() == 1
        assert await store.list_resumes(info.run_id) == []
        result = await stead.Client(store).result(info.run_id, timeout=SLOW)
        return Baseline(result, _calls(await store.load_journal(info.run_id)))
    finally:
        await store.close()
        workers.stop_all()


def _calls(journal: list[Record]) -> int:
    """The records of calls (a started marker rides along with a sibling's
    commit or not, as timing has it: it is not counted)."""
    return sum(1 for r in journal if r.status != "started")


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    return asyncio.run(_uninterrupted(tmp_path_factory.mktemp("baseline")))


@dataclasses.dataclass(frozen=True)
class Scenario:
    args: tuple[str, ...]
    committed: frozenset[str]  # what the journal must hold when the process dies
    gather_done: bool = False  # open the gate before the crash (it comes after the gather)


SCENARIOS = {
    "before-the-first-step-commits": Scenario(("--crash", "before:1"), frozenset()),
    "after-the-first-step-commits": Scenario(("--crash", "after:1"), frozenset({"fetch"})),
    "before-the-model-answer-commits": Scenario(
        ("--crash", "before:1:plan"), frozenset({"fetch"})
    ),
    "after-the-model-answer-commits": Scenario(
        ("--crash", "after:1:plan"), frozenset({"fetch", "plan"})
    ),
    "mid-gather-after-one-branch-commits": Scenario(
        ("--crash", "after:1:part0"), frozenset({"fetch", "plan", "part0"})
    ),
    "mid-gather-a-step-kills-its-own-process": Scenario(
        ("--kill-in-step", "part1:part0"), frozenset({"fetch", "plan", "part0"})
    ),
    "before-a-commit-carrying-a-recorded-value": Scenario(
        ("--crash", "before:1:combine"),
        frozenset({"fetch", "plan", "part0", "part1", "part2"}), gather_done=True,
    ),
    "before-the-final-commit": Scenario(
        ("--crash", "before:7"), frozenset(STEPS), gather_done=True
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS.values()), ids=list(SCENARIOS))
async def test_a_killed_worker_is_resumed_not_rerun(
    workers: Workers, store: stead.Store, baseline: Baseline, scenario: Scenario
) -> None:
    run_id = (await stead.Client(store).start("pipeline", 4, version=1)).run_id
    if scenario.gather_done:
        workers.open_gate()
    crashed = workers.start("--lease", "1.0", *scenario.args)
    assert await workers.exit_code(crashed) == KILLED, workers.output(crashed)

    at_crash = await store.load_journal(run_id)
    assert {r.name for r in at_crash
            if r.kind in ("step", "llm") and r.status != "started"} == scenario.committed
    assert {r.epoch for r in at_crash} <= {1}
    row = await store.get_run(run_id)
    assert (row.status, row.epoch) == ("running", 1)
    assert row.lease_owner is not None  # the dead worker never gave its lease back
    ran_before = workers.step_names(run_id)
    asked_before = workers.model_calls()
    for name in scenario.committed - {"plan"}:
        assert ran_before[name] == 1, name

    workers.open_gate()
    fresh = workers.start("--lease", "1.0", "--until-done")
    assert await workers.exit_code(fresh) == 0, workers.output(fresh)

    assert await stead.Client(store).result(run_id, timeout=SLOW) == baseline.result
    ran = workers.step_names(run_id)
    for name in STEPS:
        if name == "plan":
            continue
        if name in scenario.committed:
            assert ran[name] == 1, f"{name} was acknowledged and must not run again"
        else:
            assert ran[name] == ran_before[name] + 1, f"{name} must run once in the new worker"
    if "plan" in scenario.committed:
        assert workers.model_calls() == 1, "the model was asked again for an acknowledged answer"
    else:
        assert workers.model_calls() == asked_before + 1

    journal = await store.load_journal(run_id)
    check_journal(journal)
    assert _calls(journal) == baseline.records
    assert journal[: len(at_crash)] == at_crash, "committed records must never change"
    assert {r.epoch for r in journal[len(at_crash):]} <= {2}

    resumes = await store.list_resumes(run_id)
    assert len(resumes) == 1
    resume = resumes[0]
    assert (resume.epoch, resume.code_version) == (2, "pipeline@1")
    assert resume.from_seq == len(at_crash)
    assert resume.reused == len(at_crash)
    if at_crash:
        assert resume.reused > 0
    final = await store.get_run(run_id)
    assert (final.epoch, final.lease_owner) == (2, None)


@pytest.mark.slow
@pytest.mark.parametrize(("crash", "acknowledged"), [("before:1:after", False),
                                                     ("after:1:after", True)])
async def test_a_crash_after_a_waits_event_resumes_with_that_event_once(
    workers: Workers, store: stead.Store, crash: str, acknowledged: bool
) -> None:
    """The event a wait received rides with the run's next write: a worker
    killed before that write commits leaves the journal without it, and the
    next worker reads the same event again from the store, once."""
    client = stead.Client(store)
    run_id = (await client.start("approved", version=1)).run_id
    first = workers.start("--until-done")
    assert await workers.exit_code(first) == 0, workers.output(first)
    assert (await store.get_run(run_id)).status == "waiting"
    delivered = await client.deliver(run_id, event_id="e1", kind="approval",
                                     payload={"approved": "yes"})
    assert isinstance(delivered, stead.Accepted)

    crashed = workers.start("--lease", "1.0", "--crash", crash)
    assert await workers.exit_code(crashed) == KILLED, workers.output(crashed)
    at_crash = await store.load_journal(run_id)
    waits = [r for r in at_crash if r.kind == "wait" and r.status != "open"]
    assert len(waits) == (1 if acknowledged else 0)
    assert workers.step_names(run_id)["after"] == 1

    fresh = workers.start("--lease", "1.0", "--until-done")
    assert await workers.exit_code(fresh) == 0, workers.output(fresh)
    assert await client.result(run_id, timeout=SLOW) == {"approved": "yes"}
    assert workers.step_names(run_id)["after"] == (1 if acknowledged else 2)
    journal = await store.load_journal(run_id)
    check_journal(journal)
    assert journal[: len(at_crash)] == at_crash, "committed records must never change"
    outcome = [r for r in journal if r.kind == "wait" and r.status != "open"]
    assert [(r.status, json.loads(r.payload)["event_id"]) for r in outcome] == [("ok", "e1")]
    assert [e.event_id for e in await store.list_events(run_id)] == ["e1"]


async def _stop_mid_step(workers: Workers, store: stead.Store, *extra: str) -> str:
    """Start a `slow` run, SIGTERM its worker while the gated step is in flight,
    and wait until the worker has taken the signal. Returns the run id."""
    run_id = (await stead.Client(store).start("slow", version=1)).run_id
    proc = workers.start("--lease", "30", *extra)
    await wait_until("the gated step to start", lambda: workers.step_names(run_id)["gated"] == 1)
    proc.send_signal(signal.SIGTERM)
    await wait_until("the worker to take SIGTERM", lambda: workers.saw("stopping"))
    return run_id


async def _finish_and_check(workers: Workers, store: stead.Store, run_id: str) -> None:
    workers.open_gate()
    fresh = workers.start("--lease", "30", "--until-done")
    assert await workers.exit_code(fresh) == 0, workers.output(fresh)
    assert await stead.Client(store).result(run_id, timeout=SLOW) == ["first", "gated", "last"]
    check_journal(await store.load_journal(run_id))


@pytest.mark.slow
async def test_sigterm_lets_the_step_finish_then_releases_the_lease(
    workers: Workers, store: stead.Store
) -> None:
    run_id = await _stop_mid_step(workers, store)
    workers.open_gate()  # the in-flight step completes during the grace period
    proc = workers.procs[0][0]
    assert await workers.exit_code(proc) == 0, workers.output(proc)

    row = await store.get_run(run_id)
    assert (row.status, row.epoch, row.lease_owner, row.lease_expires_at) == (
        "running", 1, None, None
    )
    assert [r.name for r in await store.load_journal(run_id)] == ["first", "gated"]
    # The 30 s lease was given back: another worker claims the run right now.
    claimed = await store.claim("probe", ["slow@1"], 30.0, 10)
    assert [(r.run_id, r.epoch) for r in claimed] == [(run_id, 2)]
    await store.release(Fence(run_id, 2, "probe"))

    await _finish_and_check(workers, store, run_id)
    assert workers.step_names(run_id) == {"first": 1, "gated": 1, "last": 1}
    [resume] = await store.list_resumes(run_id)
    assert (resume.epoch, resume.from_seq, resume.reused) == (3, 2, 2)


@pytest.mark.slow
async def test_sigterm_past_the_grace_period_cancels_the_step_and_releases(
    workers: Workers, store: stead.Store
) -> None:
    run_id = await _stop_mid_step(workers, store, "--grace", "0.2")
    proc = workers.procs[0][0]
    assert await workers.exit_code(proc) == 0, workers.output(proc)

    row = await store.get_run(run_id)
    assert (row.status, row.epoch, row.lease_owner) == ("running", 1, None)
    assert [r.name for r in await store.load_journal(run_id)] == ["first"]

    await _finish_and_check(workers, store, run_id)
    # The cancelled call was never acknowledged, so it ran again; nothing else did.
    assert workers.step_names(run_id) == {"first": 1, "gated": 2, "last": 1}
    [resume] = await store.list_resumes(run_id)
    assert (resume.epoch, resume.from_seq, resume.reused) == (2, 1, 1)


# -- continue-as-new: one transaction ends the run and starts its successor -------
@pytest.mark.slow
@pytest.mark.parametrize("point", ["before:3", "after:3", "before:6", "after:6"])
async def test_a_crash_around_continue_as_new_neither_loses_nor_duplicates_the_successor(
    workers: Workers, store: stead.Store, point: str
) -> None:
    client = stead.Client(store)
    first = await client.start("looping", 0, 6, 2, version=1, task_id="loop-1")
    crashed = workers.start("--lease", "1.0", "--crash", point)
    assert await workers.exit_code(crashed) == KILLED, workers.output(crashed)
    fresh = workers.start("--lease", "1.0", "--until-done")
    assert await workers.exit_code(fresh) == 0, workers.output(fresh)

    chain = [first.run_id]
    while True:
        children = (await client.lineage(chain[-1])).children
        assert len(children) <= 1, "a run has one successor at most"
        if not children:
            break
        chain.append(children[0].run_id)
    assert len(chain) == 3
    runs = await client.list_runs()
    assert sorted(r.run_id for r in runs) == sorted(chain), "no successor made twice"
    assert {(r.status, r.task_id) for r in runs} == {("completed", "loop-1")}
    assert (await client.get(chain[-1])).result == {"turns": 6}
    # Each turn's step ran once: the crash lost no acknowledged turn.
    turns = [line.split()[1] for line in workers.steps().elements()]
    assert sorted(turns) == [f"turn{i}" for i in range(6)]
    for run_id in chain:
        journal = await store.load_journal(run_id)
        check_journal(journal)
        assert len(journal) == 2


# -- an attempt in flight when its worker died is counted --------------------------
@pytest.mark.slow
async def test_a_step_killed_mid_flight_counts_as_an_attempt(
    workers: Workers, store: stead.Store, baseline: Baseline
) -> None:
    run_id = (await stead.Client(store).start("pipeline", 4, version=1)).run_id
    # part1 dies once part2's record is durable; part2 waits for the gate,
    # opened once the gather has started: part1 is in flight when part2 commits.
    crashed = workers.start("--lease", "1.0", "--kill-in-step", "part1:part2")
    await wait_until("the gather to start", lambda: workers.step_names(run_id)["part0"] == 1)
    workers.open_gate()
    assert await workers.exit_code(crashed) == KILLED, workers.output(crashed)
    at_crash = await store.load_journal(run_id)
    # part1's started marker rode along with part2's commit.
    assert ("part1", 1, "started") in {(r.name, r.attempt, r.status) for r in at_crash}
    assert "part1" not in {r.name for r in at_crash if r.status == "ok"}

    fresh = workers.start("--lease", "1.0", "--until-done")
    assert await workers.exit_code(fresh) == 0, workers.output(fresh)
    assert await stead.Client(store).result(run_id, timeout=SLOW) == baseline.result
    part1 = [(r.attempt, r.status, r.epoch) for r in await store.load_journal(run_id)
             if r.name == "part1"]
    assert part1[0] == (1, "started", 1) and part1[-1] == (2, "ok", 2)
    assert workers.step_names(run_id)["part1"] == 2


# -- one call at a time: the marker rides on the lease renewal -----------------------
async def _doomed(store: stead.Store, run_id: str) -> list[tuple[int, str, int]]:
    return [(r.attempt, r.status, r.epoch) for r in await store.load_journal(run_id)
            if r.name == "doomed"]


async def _killed(workers: Workers, store: stead.Store, run_id: str, epoch: int) -> None:
    """A worker claims the run (at `epoch`) and `doomed` kills it mid-flight,
    after a renewal stored its started marker; nothing else committed."""
    crashed = workers.start("--lease", "1.5")
    assert await workers.exit_code(crashed) == KILLED, workers.output(crashed)
    row = await store.get_run(run_id)
    assert (row.status, row.epoch) == ("running", epoch)
    assert ("doomed", epoch) in {(m["name"], m["epoch"]) for m in json.loads(row.in_flight)}
    # The marker is not journaled: the run did one thing at a time.
    assert "started" not in {r.status for r in await store.load_journal(run_id)}


async def _finish(workers: Workers, store: stead.Store, run_id: str) -> Any:
    """A fresh worker takes the run over and finishes it: its result."""
    fresh = workers.start("--lease", "1.5", "--until-done")
    assert await workers.exit_code(fresh) == 0, workers.output(fresh)
    return await stead.Client(store).result(run_id, timeout=SLOW)


@pytest.mark.slow
@pytest.mark.parametrize(("kills", "attempts", "deaths", "outcome", "doomed"), [
    # Killed once, no retry=: the dead attempt counted, the one that returned is 2.
    (1, 0, 1, "survived", [(2, "ok", 2)]),
    # Kills its worker every time: failed after its two attempts, not run a third time.
    (99, 2, 2, "WorkerDied after 2", [(2, "error", 3)]),
], ids=["counted", "exhausted"])
async def test_a_lone_step_killed_mid_flight_counts_as_an_attempt(
    workers: Workers, store: stead.Store, kills: int, attempts: int, deaths: int,
    outcome: str, doomed: list[tuple[int, str, int]],
) -> None:
    run_id = (await stead.Client(store).start("lonely", kills, attempts, version=1)).run_id
    for epoch in range(1, deaths + 1):
        await _killed(workers, store, run_id, epoch)

    assert await _finish(workers, store, run_id) == {"before": "before", "doomed": outcome}
    assert await _doomed(store, run_id) == doomed
    assert workers.step_names(run_id) == {"before": 1, "doomed": deaths + (outcome == "survived")}
    check_journal(await store.load_journal(run_id))


@pytest.mark.slow
async def test_a_lasting_step_that_completed_is_never_counted_as_died(
    workers: Workers, store: stead.Store
) -> None:
    run_id = (await stead.Client(store).start("lonely", 0, 1, version=1)).run_id
    # `before` outlasts a renewal (its marker is stored with the run), then
    # the worker dies right after its outcome commits, before the next renewal.
    crashed = workers.start("--lease", "1.5", "--crash", "after:1:before")
    assert await workers.exit_code(crashed) == KILLED, workers.output(crashed)
    # The run still holds the marker of `before`, whose outcome is journaled
    # (`before` returned just after a renewal: the next was a third of a lease away).
    row = await store.get_run(run_id)
    assert [(m["name"], m["attempt"]) for m in json.loads(row.in_flight)] == [("before", 1)]

    assert await _finish(workers, store, run_id) == {"before": "before", "doomed": "survived"}
    assert workers.step_names(run_id) == {"before": 1, "doomed": 1}
    assert [(r.name, r.attempt, r.status) for r in await store.load_journal(run_id)
            if r.kind == "step"] == [("before", 1, "ok"), ("doomed", 1, "ok")]
