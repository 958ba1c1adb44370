"""The crash matrix: a workflow killed at every boundary, by real SIGKILLs.

    report = await stead.testing.crash_matrix(
        "myapp.workflows:app", "refund_order", ["123", 4200],
        events={"user_confirmation": confirm}, services=Services(calls=count_calls))
    report.assert_ok()

It runs the workflow once uninterrupted in a worker process (the reference),
noting every journal write; then, for each point (`stead.testing.points`),
starts a fresh run, lets a worker process die there (SIGKILL: no `finally`, no
lease release), starts a new worker process, and drives the run to its end,
delivering an event to each wait it opens (`events`) and, once the run is
back on its feet, delivering every event again, twice. Per point it reports:

- the run's status, result and task state, against the reference's (the run's
  own id is written as RUN when compared);
- the calls each effect key received outside (`services.calls`): at most one,
  or more under the same key for an effect declared idempotent; a stop as
  `outcome_unknown` with nothing sent twice passes, flagged for a human;
- whether each event was accepted once, its redeliveries being duplicates;
- the seconds from the worker's death to the run's end.

Each point runs in a folder of its own, the worker processes' working
directory: an app's relative paths (a repository to edit, fake services'
files) stay there, and `services.prepare(folder)` readies it first. Points run
one after the other on one database; each run has a task id of its own.

The worker processes are forks of one server that imported stead before the
matrix began (`stead.testing._processes`); each imports the app once its
point's folder and environment are set, on the point's critical path.
`preload` names libraries the server imports too, once: an app that imports a
heavy framework (LangGraph's `langgraph.graph` takes most of a second) then
costs a point only its own module's import.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import re
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stead import errors
from stead.app import App
from stead.client import Client, RunInfo
from stead.records import TERMINAL, Boundary, Record, RecordKind, RunStatus, WaitRow, WaitState
from stead.store import open_store
from stead.testing import _processes, _worker_process
from stead.testing.hooks import Event, EventSource, Services, Waiting
from stead.testing.points import REFERENCE, Point, enumerate_points
from stead.testing.report import SAME, STOPPED, EffectCalls, MatrixReport, PointResult
from stead.workflow.waits import Accepted, Delivery, Duplicate

DYING_LEASE = 0.5  # the worker that dies: its run is taken over soon after
FRESH_LEASE = 5.0  # the one that recovers: never loses its lease on a slow machine
DEADLINE = 60.0  # a phase that takes longer is a hang, reported as such
MAX_PRELOAD = 64  # modules the workers' server imports ahead
_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
LAST_GASP = 5.0  # how long a worker may take to die once its run is seen ended


def app_spec(app: App | str) -> str:
    """`module:attribute` of `app`, for the worker processes to import it."""
    if isinstance(app, str):
        return app
    for name, module in list(sys.modules.items()):
        if name == "__main__" or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if value is app:
                return f"{name}:{attr}"
    raise errors.SteadError(
        f"cannot find app {app.name!r} in any imported module; the worker processes import "
        "it by name: pass it as 'module:attribute'"
    )


async def crash_matrix(
    app: App | str,
    workflow: str,
    args: Sequence[Any] = (),
    *,
    kwargs: Mapping[str, Any] | None = None,
    events: Mapping[str, EventSource] | None = None,
    services: Services | None = None,
    db: str | None = None,
    folder: Path | str | None = None,
    progress: Callable[[str], None] | None = None,
    preload: Sequence[str] = (),
) -> MatrixReport:
    """Kill a worker running `workflow(*args, **kwargs)` of `app` at every
    boundary and report what each recovery did (see the module's docstring).

    `events` maps a wait's kind to the event to deliver to it; `services`
    counts the calls the outside received. The runs go to `db` (default: a new
    SQLite file in `folder`); `folder` (default: a new temporary one, kept)
    holds the points' folders and the workers' logs. `progress` is told of each
    point as it ends. `preload` names modules (libraries the app imports, such
    as `"langgraph.graph"`, not modules that read the environment or the
    current directory as they load) the workers' server imports once, before
    any point; each must import here."""
    import tempfile

    preloaded = check_preload(preload)

    root = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="stead-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    url = db or f"sqlite:///{root.resolve()}/matrix.db"
    spec = app_spec(app)
    loaded = _worker_process.load_app(spec) if isinstance(app, str) else app
    loaded.get(workflow)  # an unknown workflow fails here, with the names it has
    store = await open_store(url)
    try:
        matrix = _Matrix(spec, url, Client(store, loaded), workflow, list(args),
                         dict(kwargs or {}), dict(events or {}), services or Services(),
                         root.resolve(), preloaded)
        try:
            return await matrix.run(progress or (lambda _line: None))
        finally:
            matrix.workers.close()
    finally:
        await store.close()


def check_preload(names: Sequence[str]) -> list[str]:
    """`names` checked: module names, not too many, each importable here (a
    typo fails now, in one line, not in every worker process)."""
    if isinstance(names, str):
        raise errors.InvalidInput(f"preload is a list of module names, not the string {names!r}")
    found = list(dict.fromkeys(names))
    if len(found) > MAX_PRELOAD:
        raise errors.InvalidInput(f"preload names {len(found)} modules; at most {MAX_PRELOAD}")
    for name in found:
        if not isinstance(name, str) or not _MODULE_NAME.fullmatch(name):
            raise errors.InvalidInput(f"preload: {str(name)[:80]!r} is not a module name")
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise errors.InvalidInput(f"preload: cannot import {name}: {exc}") from exc
    return found


@dataclasses.dataclass
class _Episode:
    """One run of the matrix: its folder, its worker processes, its events."""

    number: int
    folder: Path
    run_id: str = ""
    seen_waits: list[str] = dataclasses.field(default_factory=list)
    delivered: dict[str, tuple[WaitRow, Event]] = dataclasses.field(default_factory=dict)
    procs: list[_processes.Process] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def task_id(self) -> str:
        return f"crash-matrix-{self.number}"


@dataclasses.dataclass(frozen=True)
class _Outcome:
    info: RunInfo
    result: str
    state: str
    journal: list[Record]


class _NoEvent(Exception):
    pass


class _Matrix:
    def __init__(self, spec: str, url: str, client: Client, workflow: str, args: list[Any],
                 kwargs: dict[str, Any], events: dict[str, EventSource], services: Services,
                 root: Path, preload: list[str]) -> None:
        self.spec, self.url, self.client = spec, url, client
        self.workflow, self.args, self.kwargs = workflow, args, kwargs
        self.events, self.services, self.root = events, services, root
        self.reference: _Outcome | None = None
        self.reference_episode: _Episode | None = None
        self.reference_redelivered: list[Delivery] = []
        self.workers = _processes.WorkerProcesses(spec, url, root, preload)

    async def run(self, progress: Callable[[str], None]) -> MatrixReport:
        began = time.monotonic()
        reference, tally = await self._reference()
        progress(f"reference: {reference.info.status}, {len(tally)} journal writes")
        results = []
        for number, point in enumerate(enumerate_points(tally), 1):
            result = await self._point(number, point)
            results.append(result)
            progress(f"{'ok  ' if result.ok else 'FAIL'} {number:>3}. {point.where}"
                     + ("" if result.ok else ": " + "; ".join(result.problems)))
        database = "PostgreSQL" if self.url.startswith("postgres") else "SQLite"
        return MatrixReport(self.spec, self.workflow, self.args, self.kwargs, database,
                            await self._judge_reference(reference), tuple(results),
                            time.monotonic() - began)

    # -- the reference ------------------------------------------------------------
    async def _reference(self) -> tuple[_Outcome, list[dict[str, Any]]]:
        ep = await self._start(0)
        tally = ep.folder / "tally.json"
        proc = self._spawn(ep, "reference", lease=FRESH_LEASE, tally=tally)
        try:
            info = await self._drive(ep, deadline=DEADLINE)
            self.reference_redelivered = await self._redeliver(ep)
        except _NoEvent as exc:
            raise errors.SteadError(str(exc)) from None
        finally:
            await _processes.stop(proc, DEADLINE)
        if not _settled(info) or not tally.exists():
            tail = _processes.tail(ep.folder / "worker-reference.log")
            raise errors.SteadError(
                f"the reference run of {self.workflow} did not end (status {info.status}) "
                f"within {DEADLINE:g} s; the worker's log ends:\n{tail}")
        if info.status != RunStatus.COMPLETED:
            raise errors.SteadError(
                f"the reference run of {self.workflow} ended as {info.status}, not completed: "
                f"{(info.error or {}).get('message')}; the matrix compares every point with "
                "a run that completes")
        self.reference = await self._outcome(ep, info)
        self.reference_episode = ep
        entries: list[dict[str, Any]] = json.loads(tally.read_text())
        return self.reference, entries

    async def _judge_reference(self, reference: _Outcome) -> PointResult:
        ep = self.reference_episode
        assert ep is not None
        calls = self._calls(ep, reference.journal)
        ep.problems += [f"{c.calls} calls under key {c.key}" for c in calls if not c.ok]
        events_once = None
        if ep.delivered:
            events_once = await _check_events(self.client, ep, self.reference_redelivered)
        return PointResult(REFERENCE, reference.info.status, SAME, True, True, tuple(calls),
                           events_once, None, tuple(ep.problems))

    # -- one point ----------------------------------------------------------------
    async def _point(self, number: int, point: Point) -> PointResult:
        ep = await self._start(number)
        try:
            killed = await self._kill_at(ep, point)
            if killed is None:
                return self._unreached(ep, point)
            fresh = self._spawn(ep, "fresh", lease=FRESH_LEASE)
            try:
                info = await self._drive(ep, deadline=DEADLINE)
                recovered = time.monotonic() - killed
                redelivered = await self._redeliver(ep)
            finally:
                await _processes.kill(fresh)  # the run has ended: nothing of it is left to lose
            if not _settled(info):
                ep.problems.append(f"the run did not end within {DEADLINE:g} s "
                                   f"(status {info.status})")
                return self._failed(ep, point, info)
            return await self._judge(ep, point, info, recovered, redelivered)
        except _NoEvent as exc:
            ep.problems.append(str(exc))
            return self._failed(ep, point, await self.client.get(ep.run_id))
        finally:
            for proc in ep.procs:
                await _processes.kill(proc)
            if not (await self.client.get(ep.run_id)).done:
                await self.client.cancel(ep.run_id)

    async def _kill_at(self, ep: _Episode, point: Point) -> float | None:
        """Run until the worker dies at `point`; when it died (monotonic
        seconds), or None if it never did."""
        proc = self._spawn(ep, "dying", lease=DYING_LEASE, crash=point.crash)
        if point.boundary in (Boundary.WAITING, Boundary.DELIVERY):
            assert point.wait is not None
            wait_number = point.wait

            def at_wait(open_waits: list[WaitRow]) -> bool:
                return len(ep.seen_waits) >= wait_number and any(
                    w.wait_id == ep.seen_waits[wait_number - 1] for w in open_waits)

            info = await self._drive(ep, deadline=DEADLINE, hold=at_wait, proc=proc)
            if info.status != RunStatus.WAITING:
                await _processes.kill(proc)
                return None
            if point.boundary == Boundary.WAITING:
                await _processes.kill(proc)
                killed = time.monotonic()
                await self._answer(ep)  # while no worker runs
                return killed
            await self._answer(ep)
            deadline = time.monotonic() + DEADLINE
            while (await self.client.get(ep.run_id)).status in (RunStatus.WAITING,
                                                               RunStatus.PENDING):
                if time.monotonic() > deadline or proc.poll() is not None:
                    return None
                await asyncio.sleep(0.005)
            await _processes.kill(proc)
            return time.monotonic()
        await self._drive(ep, deadline=DEADLINE, proc=proc)
        # Killed just after the run's last write, it dies as the run is seen ended;
        # one that lives on never reached its point.
        if await _processes.exit_code(proc, LAST_GASP) is None:
            await _processes.kill(proc)
            return None
        if proc.returncode != -signal.SIGKILL:
            log = _processes.tail(ep.folder / "worker-dying.log", 5)
            ep.problems.append(f"the worker exited with code {proc.returncode}:\n{log}")
            return None
        return time.monotonic()

    def _unreached(self, ep: _Episode, point: Point) -> PointResult:
        ep.problems.append(
            "the worker was never killed here: the run made fewer journal writes (or "
            "other ones) than its reference; is the workflow deterministic?")
        return PointResult(point, "-", "not reached", False, False, (), None, None,
                           tuple(ep.problems))

    def _failed(self, ep: _Episode, point: Point, info: RunInfo) -> PointResult:
        return PointResult(point, info.status, "did not end", False, False, (), None, None,
                           tuple(ep.problems))

    async def _judge(self, ep: _Episode, point: Point, info: RunInfo, recovered: float,
                     redelivered: list[Delivery]) -> PointResult:
        assert self.reference is not None
        got = await self._outcome(ep, info)
        calls = self._calls(ep, got.journal)
        problems = ep.problems
        problems += [f"{c.calls} calls under key {c.key}" + (
            f" of effect {c.effect}" if c.effect else
            ": no effect of the run has this key, so a call to the outside was made outside "
            "run.effect (in a step?) and repeated by the recovery") for c in calls if not c.ok]
        same_result = got.result == self.reference.result
        same_state = got.state == self.reference.state
        if info.status == RunStatus.OUTCOME_UNKNOWN:
            verdict = STOPPED
        elif info.status != self.reference.info.status:
            verdict = f"ended as {info.status}, not {self.reference.info.status}"
            problems.append(verdict + f": {(info.error or {}).get('message')}")
        elif not same_result or not same_state:
            verdict = "result differs" if not same_result else "task state differs"
            problems.append(f"{verdict}: {got.result if not same_result else got.state}")
        else:
            verdict = SAME
        problems += _journal_problems(got.journal)
        events_once = None
        if ep.delivered:
            events_once = await _check_events(self.client, ep, redelivered)
        return PointResult(point, info.status, verdict, same_result, same_state, tuple(calls),
                           events_once, recovered, tuple(problems))

    # -- runs, workers, events ------------------------------------------------------
    async def _start(self, number: int) -> _Episode:
        ep = _Episode(number, self.root / (f"point-{number:03d}" if number else "reference"))
        ep.folder.mkdir(parents=True, exist_ok=True)
        if self.services.prepare is not None:
            self.services.prepare(ep.folder)
        info = await self.client.start(self.workflow, *self.args, task_id=ep.task_id,
                                       **self.kwargs)
        ep.run_id = info.run_id
        return ep

    def _spawn(self, ep: _Episode, label: str, *, lease: float, crash: str | None = None,
               tally: Path | None = None) -> _processes.Process:
        env = dict(self.services.env(ep.folder)) if self.services.env is not None else {}
        proc = self.workers.start(ep.folder, label, env, lease=lease, crash=crash, tally=tally)
        ep.procs.append(proc)
        return proc

    async def _drive(self, ep: _Episode, *, deadline: float,
                     hold: Callable[[list[WaitRow]], bool] | None = None,
                     proc: _processes.Process | None = None) -> RunInfo:
        """Poll the run, answering its waits, until it ends, `proc` exits, or
        (with `hold`) it waits on a wait `hold` wants left unanswered."""
        until = time.monotonic() + deadline
        while True:
            info = await self.client.get(ep.run_id)
            if _settled(info) or (proc is not None and proc.poll() is not None):
                return info
            if info.status == RunStatus.WAITING:
                open_waits = await self.client.waits(run_id=ep.run_id)
                for w in open_waits:
                    if w.wait_id not in ep.seen_waits:
                        ep.seen_waits.append(w.wait_id)
                if hold is not None and hold(open_waits):
                    return info
                await self._answer(ep, open_waits)
            if time.monotonic() > until:
                return info
            await asyncio.sleep(0.02)

    async def _answer(self, ep: _Episode, open_waits: list[WaitRow] | None = None) -> None:
        """Deliver an event to every open wait not answered yet."""
        if open_waits is None:
            open_waits = await self.client.waits(run_id=ep.run_id)
        for wait in open_waits:
            if wait.wait_id in ep.delivered or wait.state != WaitState.OPEN:
                continue
            source = self.events.get(wait.kind)
            if source is None:
                raise _NoEvent(f"the run waits for {wait.kind!r} and events= has nothing "
                               f"for it (it has: {', '.join(self.events) or 'nothing'})")
            try:
                event = source(Waiting(ep.run_id, wait.wait_id, wait.kind,
                                       json.loads(wait.bind), ep.folder))
            except Exception as exc:
                raise _NoEvent(f"events[{wait.kind!r}] raised {type(exc).__qualname__}: "
                               f"{exc}") from exc
            ep.delivered[wait.wait_id] = (wait, event)
            verdict = await self._deliver(ep, wait, event)
            if not isinstance(verdict, Accepted):
                ep.problems.append(f"the event {event.event_id} for wait {wait.kind} was not "
                                   f"accepted: {verdict}")

    async def _redeliver(self, ep: _Episode) -> list[Delivery]:
        """Every event delivered so far, twice more, as a queue redelivers."""
        return [await self._deliver(ep, wait, event)
                for wait, event in ep.delivered.values() for _twice in (1, 2)]

    async def _deliver(self, ep: _Episode, wait: WaitRow, event: Event) -> Delivery:
        bind = event.bind if event.bind is not None else json.loads(wait.bind)
        return await self.client.deliver(ep.run_id, event_id=event.event_id,
                                         payload=event.payload, wait_id=wait.wait_id,
                                         bind=bind, token=event.token)

    async def _outcome(self, ep: _Episode, info: RunInfo) -> _Outcome:
        facts = await self.client.task_state(ep.task_id)
        journal = await self.client.journal(ep.run_id)

        def same_for_every_run(value: Any) -> str:
            text = json.dumps(value, sort_keys=True)
            return text.replace(ep.run_id, "RUN").replace(ep.task_id, "TASK")

        return _Outcome(info, same_for_every_run(info.result),
                        same_for_every_run([facts.version, facts.data]), journal)

    def _calls(self, ep: _Episode, journal: list[Record]) -> list[EffectCalls]:
        effects: dict[str, tuple[str, bool]] = {}
        for r in journal:
            if r.kind == RecordKind.EFFECT and r.status == "intent":
                data = json.loads(r.payload)
                effects[str(data["key"])] = (r.name, bool(data.get("idempotent")))
        counted = dict(self.services.calls(ep.folder)) if self.services.calls else {}
        found = []
        for key, n in counted.items():
            name, idempotent = effects.get(key, (None, False))
            found.append(EffectCalls(key, n, name, idempotent))
        return found


def _settled(info: RunInfo) -> bool:
    return info.status in TERMINAL or info.status == RunStatus.OUTCOME_UNKNOWN or (
        info.status == RunStatus.INCOMPATIBLE)


def _journal_problems(journal: list[Record]) -> list[str]:
    problems = []
    if [r.seq for r in journal] != list(range(len(journal))):
        problems.append("the journal's seqs have a gap")
    phases = [(r.addr, r.attempt, r.status) for r in journal]
    if len(phases) != len(set(phases)):
        problems.append("a call's phase is journaled twice")
    return problems


def _events_once(ep: _Episode, redelivered: list[Delivery]) -> bool:
    return all(isinstance(d, Duplicate) for d in redelivered)


async def _check_events(client: Client, ep: _Episode, redelivered: list[Delivery]) -> bool:
    """Each delivered event accepted once, each redelivery a duplicate, each
    wait consumed by its one event."""
    stored = await client.events(ep.run_id)
    waits = {w.wait_id: w for w in await client.waits(run_id=ep.run_id, state=None)}
    ok = _events_once(ep, redelivered)
    for wait_id, (_wait, event) in ep.delivered.items():
        accepted = [e for e in stored if e.event_id == event.event_id and e.verdict == "accepted"]
        consumed = waits.get(wait_id)
        if len(accepted) != 1 or consumed is None or consumed.event_id != event.event_id:
            ok = False
    if not ok:
        ep.problems.append("an event was not consumed exactly once: " + ", ".join(
            f"{e.event_id} {e.verdict}" for e in stored))
    return ok
