"""One worker's attempt at one run: the fence it writes under, the journal it
replays, and the buffer of records that ride along with the next commit.

`run.now()`, `run.uuid()` and `run.random()` are buffered, not committed on
their own: nothing that depends on them can leave the process before the next
durable write, which carries them (see docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from stead import addresses, codec, digests, errors, keys, logs, stepcode
from stead.clock import Clock
from stead.guard import Guard
from stead.intent import Matcher
from stead.policy import Action
from stead.records import (
    Fence,
    Record,
    RecordKind,
    RecordStatus,
    ResumeClass,
    ResumeDetails,
    ResumeRecord,
    RunStatus,
)
from stead.replay import Journal, markers_text
from stead.store.base import Store

log = logging.getLogger("stead.run")
T = TypeVar("T")
# The buffered records a workflow's later writes may depend on.
_VALUES = frozenset({RecordKind.NOW, RecordKind.UUID, RecordKind.RANDOM})


class Drain(BaseException):
    """Raised at a call boundary when the worker is shutting down gracefully.
    A BaseException so a workflow's `except Exception` cannot swallow it."""


class Frontier(BaseException):
    """Raised in a dry replay (`ExecutionOptions.dry`) where the workflow
    would do something live: call a function, write, wait, sleep. The replay
    ends there, having done nothing."""


class Stop(BaseException):
    """Unwinds the workflow to stop the run for a human (`status`, with `error`
    saying what is known). A BaseException, so workflow code cannot swallow it."""

    def __init__(self, status: RunStatus, error: dict[str, object]) -> None:
        super().__init__(error.get("message", status))
        self.status = status
        self.error = error


class Continued(BaseException):
    """Unwinds the workflow once `run.continue_as_new` committed: the run is
    over, its successor (`run_id`) exists. A BaseException, so workflow code
    cannot swallow it."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"continued as run {run_id}")
        self.run_id = run_id


def _acts(rec: Record) -> bool:
    """Whether writing `rec` is the run acting (not an event or a child's
    outcome it receives)."""
    return rec.kind not in (RecordKind.WAIT, RecordKind.CHILD) or rec.status == RecordStatus.OPEN


class Judge(Protocol):
    """A takeover's revalidation (`stead.revalidation.Revalidation`)."""

    @property
    def pending(self) -> bool: ...

    async def judge(self, action: Action | None) -> bool: ...


@dataclasses.dataclass(frozen=True, slots=True)
class ExecutionOptions:
    """What the worker hosting a run decides for it."""

    # A wait or timer further away than this suspends the run (lease released,
    # no worker held); a nearer one sleeps in the process.
    suspend_after: float = 1.0
    # How often a parked branch wakes to re-check what it waits for.
    recheck_every: float = 5.0
    # Where the keys that sign wait tokens come from (asked when a wait
    # opens); with None, opening a wait with a token fails.
    keyring: Callable[[], Awaitable[keys.Keyring]] | None = None
    # The largest result (of a step, effect or model call) journaled, as JSON.
    max_result_bytes: int = 16 * 1024 * 1024
    # A dry replay (`stead.dryrun`): nothing live starts and nothing is
    # written; the first live call raises `Frontier`.
    dry: bool = False


class Execution:
    def __init__(
        self,
        *,
        store: Store,
        fence: Fence,
        journal: Journal,
        clock: Clock,
        code_version: str,
        takeover: bool,
        options: ExecutionOptions,
    ) -> None:
        self.store = store
        self.fence = fence
        self.journal = journal
        self.clock = clock
        self.code_version = code_version
        self._next_seq = journal.length
        self._buffer: list[Record] = []
        # Held while the buffer or the journal's in-flight markers change:
        # the lease keeper's thread reads them (see `in_flight`).
        self._marks = threading.Lock()
        self._lock = asyncio.Lock()
        self._resume_pending = takeover
        # Written before the takeover's judgement: to be written again after it.
        self._resume_unjudged = False
        self.taken_over = takeover
        # Whether this takeover's intent diff says something changed: a call
        # marked fresh="on_resume" is then asked again (see `Run.step`).
        self.intent_changed = False
        self._lost: errors.StaleLease | None = None
        self._incompatible: errors.NonDeterminism | None = None
        self._store_failed: errors.StoreError | None = None
        self._draining = False
        self._classes: dict[ResumeClass, int] = {}
        self._inflight = 0
        self._sending_in_thread = 0  # sync effect functions running in threads now
        self._suspended = False
        self._body: asyncio.Task[Any] | None = None
        self._suspend_after = options.suspend_after
        self._recheck_every = options.recheck_every
        self._keyring = options.keyring
        self.dry = options.dry
        # What a takeover does with a step whose body changed (`App(changed_steps=)`).
        self.changed_steps = stepcode.ChangedSteps.WARN
        # In a dry replay: the last call the journal did not know ("kind 'name' at addr").
        self.frontier: str | None = None
        # The run's live wait tokens: values holding one are never stored.
        self.secrets = codec.Secrets()
        self.max_result_bytes = options.max_result_bytes
        self._blocked: set[_Blocker] = set()
        self._settling: asyncio.Task[None] | None = None
        # Argument digests, incremental for a conversation that grows: per run.
        self.digests = digests.Digests()
        # The run's intent, policy and budget ledger; None for a run that has
        # no intent under an app without a policy (nothing to check).
        self.guard: Guard | None = None
        # The app's named scope matchers (see `stead.intent`).
        self.matchers: Mapping[str, Matcher] = {}
        # The tools the app declares (None: it declares none; see `App`).
        self.tools: frozenset[str] | None = None
        self.app_name = ""
        # The app's policy version (None: it has no policy): what a wait opens
        # under, and what a wait bound to its policy version is compared with
        # when the run wakes (see `stead.waits`).
        self.policy_version: str | None = None
        # The revalidation the resume record carries (see `ResumeDetails.intent`).
        self.revalidation: dict[str, Any] | None = None
        # What replay did with each effect before the resume record was
        # written (see `ResumeDetails.effects`).
        self.resumed_effects: list[dict[str, Any]] = []
        # Each result replay found stale (see `ResumeDetails.reran`).
        self.reran: list[dict[str, Any]] = []
        # The takeover's revalidation, asked where the run first acts live
        # (see `before_live`); None for a run with nothing to revalidate.
        self.judge: Judge | None = None
        # Raises if a stored input (JSON text) does not fit the run's workflow
        # (set by the takeover, which knows the workflow; see `continue_as_new`).
        self.check_input: Callable[[str], None] | None = None
        # The migrations the version gate applied (see `ResumeDetails.migration`).
        self.migration: dict[str, Any] | None = None
        # The workspaces the takeover restored before replay, by name (see
        # `stead.workspaces`): the resume record lists them.
        self.restored: dict[str, dict[str, Any]] = {}
        # When the run fails if it has not ended (None: never), and whether
        # someone asked to cancel it: both take effect at a call boundary.
        self.deadline: float | None = None
        self._cancel_requested = False
        # Effects between their intent and their outcome: a stopping run
        # waits for them, so no outcome is left unjournaled.
        self._effects_open = 0
        self._effects_settled: asyncio.Event | None = None

    def start(self, body: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run the workflow's `body` as a task, in the run's root branch. When
        the run suspends, the task is cancelled: the store holds the run, no
        worker does."""
        context = contextvars.copy_context()
        context.run(addresses.current.set, addresses.Branch(""))
        context.run(codec.watch, self.secrets)
        # Named as the worker's task for the run, so a blocked loop is blamed on it.
        owner = asyncio.current_task()
        task = asyncio.get_running_loop().create_task(
            body, context=context, name=owner.get_name() if owner is not None else None)
        self._body = task
        return task

    def classify(self, cls: ResumeClass) -> None:
        """Count a replayed record's class for the resume record."""
        if self._resume_pending:
            self._classes[cls] = self._classes.get(cls, 0) + 1

    def note_effect(self, entry: dict[str, Any]) -> None:
        """What replay did with an effect, for the resume record (once it is
        written, later effects are the run's live work, not the takeover's)."""
        if self._resume_pending:
            self.resumed_effects.append(entry)

    # -- what happened to the run ---------------------------------------------
    @property
    def lost(self) -> errors.StaleLease | None:
        """Why this worker no longer holds the run; None while it does."""
        return self._lost

    def lose(self, exc: errors.StaleLease) -> None:
        """The lease is gone (its renewal failed): from now on nothing live
        starts and no write is sent."""
        self._lost = exc

    @property
    def incompatible(self) -> errors.NonDeterminism | None:
        """How the code no longer fits the journal; None while it does."""
        return self._incompatible

    def stop_as_incompatible(self, exc: errors.NonDeterminism) -> errors.NonDeterminism:
        """The code no longer fits the journal: from now on nothing live starts,
        and the worker finishes the run as `incompatible_checkpoint`. Returns
        `exc`, for the caller to raise."""
        self._incompatible = exc
        return exc

    @property
    def store_failed(self) -> errors.StoreError | None:
        """The store error a write of this attempt met; None if none did.
        From then on nothing live starts and nothing is written: the worker
        leaves the run to be taken over, whatever the workflow made of the
        error."""
        return self._store_failed

    @property
    def suspended(self) -> bool:
        """Whether the run suspended: its lease is released and its body cancelled."""
        return self._suspended

    @property
    def sending_in_thread(self) -> bool:
        """Whether a sync effect function is running in a thread (see `sending`)."""
        return self._sending_in_thread > 0

    # -- guards -------------------------------------------------------------
    def check_live(self, *, boundary: bool = True) -> None:
        """Before starting anything live: refuse if the run is no longer ours.
        At a call `boundary` (not while an effect's outcome is being found
        out), a requested cancel or a passed deadline stops the run too."""
        if self._lost is not None:
            raise self._lost
        if self._store_failed is not None:
            raise self._store_failed
        if self._incompatible is not None:
            raise self._incompatible
        if self._draining:
            raise Drain()
        if self.dry:
            raise Frontier()
        if not boundary:
            return
        if self._cancel_requested:
            raise Stop(RunStatus.CANCELLED, {
                "type": "Cancelled", "message": f"run {self.fence.run_id} was cancelled"})
        if self.deadline is not None and self.clock.now() >= self.deadline:
            raise Stop(RunStatus.FAILED, {
                "type": "DeadlineExceeded",
                "message": f"run {self.fence.run_id} passed its deadline "
                           f"({self.deadline:.3f}) before it ended"})

    async def before_live(self, action: Action) -> bool:
        """Before a live call: the takeover's revalidation judges `action` if
        it has not judged one yet (True if it did now); a revalidation that
        stopped the run stops every later call."""
        return False if self.judge is None else await self.judge.judge(action)

    @property
    def cancel_requested(self) -> bool:
        return self._cancel_requested

    def request_cancel(self) -> None:
        """Someone asked to cancel the run: it stops at its next call boundary
        (parked branches wake to meet it); an effect in flight first has its
        outcome journaled."""
        self._cancel_requested = True
        for blocker in list(self._blocked):
            blocker.wake()

    @contextlib.contextmanager
    def effect_open(self) -> Iterator[None]:
        """Mark an effect between its intent and its outcome."""
        self._effects_open += 1
        try:
            yield
        finally:
            self._effects_open -= 1
            if self._effects_open == 0 and self._effects_settled is not None:
                self._effects_settled.set()

    async def effects_settled(self) -> None:
        """Return once no effect of the run is between intent and outcome."""
        while self._effects_open:
            self._effects_settled = asyncio.Event()
            await self._effects_settled.wait()

    def take(self, addr: str, kind: RecordKind, name: str, digest: str) -> list[Record]:
        try:
            found = self.journal.take(addr, kind, name, digest)
        except errors.NonDeterminism as exc:
            self._incompatible = exc
            raise
        if not found and self.dry:
            self.frontier = f"{kind} {name!r} at {addr}"
        return found

    # -- writes -------------------------------------------------------------
    def record(self, addr: str, attempt: int, kind: RecordKind, name: str, digest: str,
               status: RecordStatus, payload: str) -> Record:
        if self.journal.offsets:  # the run was cut: attempts number on after the cut ones
            attempt += self.journal.offsets.get(addr, 0)
        return Record(
            seq=-1, addr=addr, attempt=attempt, kind=kind, name=name, digest=digest,
            status=status, payload=payload, epoch=self.fence.epoch, at=self.clock.now(),
        )

    def buffer(self, rec: Record) -> None:
        with self._marks:
            self._buffer.append(rec)

    def in_flight(self) -> str | None:
        """The started markers of the calls in flight whose marker no write
        has carried yet, as the JSON the lease renewal stores with the run
        (None: none): a worker that dies mid-call leaves its attempt counted
        even when nothing else commits meanwhile. Includes the markers the
        takeover found that no call has superseded yet. Called from the
        lease keeper's thread."""
        with self._marks:
            started = [r for r in self._buffer if r.status == RecordStatus.STARTED]
            return markers_text([*self.journal.in_flight(), *started])

    def died(self, addr: str, kind: RecordKind, name: str, digest: str) -> int | None:
        """The attempt of the call at `addr` a lease renewal recorded in flight
        when its worker died (see `Journal.died`), or None."""
        with self._marks:
            return self.journal.died(addr, kind, name, digest)

    @property
    def length(self) -> int:
        """How many records the run's journal holds (as this worker wrote it)."""
        return self._next_seq

    def unbuffer(self, rec: Record) -> None:
        """Take `rec` out of the buffer if it has not been written yet."""
        with self._marks:
            self._buffer[:] = [r for r in self._buffer if r is not rec]

    def journal_trace(self, context: dict[str, str] | None) -> None:
        """Journal this attempt's span context with its first write, for the
        next attempt's span to link to (see `stead.tracing`)."""
        if context is not None:
            self.buffer(self.record(f"trace@{self.fence.epoch}", 1, RecordKind.TRACE, "attempt",
                                    "", RecordStatus.OK, codec.dumps(context, what="a trace")))

    def _numbered(self, recs: Sequence[Record]) -> list[Record]:
        batch = [*self._buffer, *recs]
        return [r.numbered(self._next_seq + i) for i, r in enumerate(batch)]

    def _resume(self) -> ResumeRecord | None:
        """The resume record this write carries: the first write of a takeover
        carries it, and, if the takeover's judgement was still to come then,
        the first write after that judgement carries it again, judged (the
        store keeps one record per epoch: the later one replaces its detail)."""
        judged = self.judge is None or not self.judge.pending
        if not (self._resume_pending or (self._resume_unjudged and judged)):
            return None
        return ResumeRecord(
            run_id=self.fence.run_id, epoch=self.fence.epoch, worker_id=self.fence.worker_id,
            at=self.clock.now(), from_seq=self.journal.length,
            code_version=self.code_version, reused=self.journal.reused,
            detail=ResumeDetails(self.journal.length, self._classes,
                                 self.journal.reused_kinds, self.revalidation,
                                 self.migration, self.restored or None,
                                 self.resumed_effects or None,
                                 self.reran or None).to_json(),
        )

    def _committed(self, batch: Sequence[Record], resume: ResumeRecord | None,
                   carried: Sequence[Record]) -> None:
        self._next_seq += len(batch)
        if self.guard is not None:
            self.guard.ledger.count(batch)
        # Drop only the buffered records this batch carried: a branch may have
        # buffered another while the write was in flight (it rides the next
        # one), or taken its own out (see `unbuffer`).
        if carried:
            with self._marks:
                self._buffer[:] = [r for r in self._buffer
                                   if not any(r is c for c in carried)]
        if resume is not None:
            first = self._resume_pending
            self._resume_pending = False
            self._resume_unjudged = self.judge is not None and self.judge.pending
            if not first:
                return
            log.info(
                "run %s resumed by %s at epoch %d from seq %d, %d record(s) reused",
                resume.run_id, resume.worker_id, resume.epoch, resume.from_seq, resume.reused,
            )

    async def write(
        self,
        recs: Sequence[Record],
        send: Callable[[list[Record], ResumeRecord | None], Awaitable[T]],
        *,
        drop: Record | None = None,
    ) -> T:
        """Number `recs` after the buffered records and hand both (and the
        pending resume record) to `send`, one fenced store transaction. If `send`
        raises, nothing was written and the buffer is kept. `drop`, a buffered
        record `recs` make needless (a call's started marker, once its outcome
        is written), is left out if no earlier write carried it."""
        if self.dry:
            raise Frontier()
        if recs and self.judge is not None and self.judge.pending and _acts(recs[0]):
            # A live write no call judged first (a wait, a state change...).
            first = recs[0]
            await self.judge.judge(Action(first.kind, first.name, None, {},
                                          digest=first.digest or None))
        async with self._lock:
            if self._lost is not None:
                raise self._lost
            if self._store_failed is not None:
                raise self._store_failed
            if drop is not None:
                self.unbuffer(drop)
            carried = list(self._buffer)
            batch = self._numbered(recs)
            # A write made while the run only receives (an event, a child's
            # outcome) comes before the policy's judgement: it carries the
            # record as it stands ("not asked" yet), so a crash right after it
            # still leaves this takeover its record; the judgement rewrites it.
            resume = self._resume()
            result = await self._send(lambda: send(batch, resume))
            self._committed(batch, resume, carried)
            return result

    async def _send(self, send: Callable[[], Awaitable[T]]) -> T:
        """Make a store write of this run: a lost lease or a store error stops
        every write after it (see `lost`, `store_failed`)."""
        self._inflight += 1
        try:
            return await send()
        except errors.StaleLease as exc:
            self._lost = exc
            raise
        except errors.CorruptRecord:
            raise
        except errors.StoreError as exc:
            self._store_failed = exc
            raise
        finally:
            self._idle()

    async def write_beside(self, send: Callable[[], Awaitable[T]]) -> T:
        """A fenced write beside the journal (a stream's append, see
        `stead.streams`), ordered with the journal's writes. The values the
        buffer holds (`run.now()`, `run.uuid()`, `run.random()`) are journaled
        first: what is written may depend on them, and nothing that does may
        leave the process before them. Started markers stay buffered."""
        if any(r.kind in _VALUES for r in self._buffer):
            await self.commit(())
        async with self._lock:
            if self._lost is not None:
                raise self._lost
            if self._store_failed is not None:
                raise self._store_failed
            return await self._send(send)

    async def commit(self, recs: Sequence[Record], *, drop: Record | None = None) -> None:
        """Journal `recs` (with the buffered records, but `drop`: see `write`)
        in one fenced transaction."""
        await self.write(recs, lambda batch, resume: self.store.append(self.fence, batch, resume),
                         drop=drop)

    async def finish(self, status: RunStatus, *, result: str | None = None,
                     error: str | None = None) -> None:
        if error is not None:  # an exception's message may quote a token
            error = self.secrets.mask(error)
        await self.write((), lambda batch, resume: self.store.finish(
            self.fence, status, result=result, error=error, records=batch, resume=resume,
        ))

    async def keyring(self) -> keys.Keyring:
        if self._keyring is None:
            raise errors.KeysUnavailable("no keys to sign wait tokens: waits need a worker "
                                         "to run them")
        return await self._keyring()

    # -- waiting ------------------------------------------------------------
    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Mark live work in flight (user code, a store round trip): the run
        must not suspend under it."""
        self._inflight += 1
        try:
            yield
        finally:
            self._idle()

    @contextlib.contextmanager
    def sending(self, *, in_thread: bool) -> Iterator[None]:
        """Mark an effect being sent: live work, as in `busy`. A sync effect
        function runs `in_thread`, which no one can stop: the worker waits for
        it past its grace period, to journal its outcome."""
        self._inflight += 1
        self._sending_in_thread += in_thread
        try:
            yield
        finally:
            self._sending_in_thread -= in_thread
            self._idle()

    def _idle(self) -> None:
        self._inflight -= 1
        if self._inflight == 0 and self._blocked:
            self._schedule_settle()

    async def sleep_until(self, at: float) -> None:
        """Wait until the wall-clock time `at`; a long wait suspends the run."""
        delay = at - self.clock.now()
        if delay <= 0:
            return
        if self.dry:
            raise Frontier()
        if delay <= self._suspend_after:
            await asyncio.sleep(delay)
            return
        while self.clock.now() < at:
            self.check_live()
            await self.block(wake_at=at, wait_id=None)

    async def block(self, *, wake_at: float | None, wait_id: str | None,
                    child_id: str | None = None) -> None:
        """Park this branch until something may have changed: its wake time, a
        periodic re-check, a drain, or a failed attempt to suspend (an event
        arrived). The caller re-checks its condition and blocks again if need be.
        When every branch is parked and nothing is in flight, the run suspends:
        its lease is released and it holds no worker until it is woken."""
        if self.dry:
            raise Frontier()
        loop = asyncio.get_running_loop()
        blocker = _Blocker(wake_at, wait_id, loop.create_future(), child_id)
        self._blocked.add(blocker)
        until = self.clock.now() + self._recheck_every
        if wake_at is not None:
            until = min(until, wake_at)
        if self.deadline is not None:
            until = min(until, self.deadline)
        timer = loop.call_later(max(0.0, until - self.clock.now()), blocker.wake)
        self._schedule_settle()
        try:
            await blocker.future
        finally:
            timer.cancel()
            self._blocked.discard(blocker)

    def drain(self) -> None:
        """The worker is stopping: parked branches wake to meet `Drain`."""
        self._draining = True
        for blocker in list(self._blocked):
            blocker.wake()

    def _schedule_settle(self) -> None:
        if self._settling is None or self._settling.done():
            # The runtime's task, not a branch of the workflow (see `addresses`).
            with addresses.outside_branches():
                self._settling = asyncio.get_running_loop().create_task(self._settle())

    async def _settle(self) -> None:
        # Let every branch run up to its next await before judging quiescence.
        for _ in range(5):
            await asyncio.sleep(0)
        if self._inflight or not self._blocked or self._suspended or self._draining:
            return
        if self._lost is not None or self._incompatible is not None:
            return
        times = [b.wake_at for b in self._blocked if b.wake_at is not None]
        if self.deadline is not None:
            times.append(self.deadline)  # a waiting run wakes to fail at its deadline
        wake_at = min(times) if times else None
        if wake_at is not None and wake_at - self.clock.now() <= self._suspend_after:
            return  # a short wait: cheaper to sleep here than to park and replay
        wait_ids = [b.wait_id for b in self._blocked if b.wait_id is not None]
        children = [b.child_id for b in self._blocked if b.child_id is not None]
        try:
            await self.write((), lambda batch, resume: self.store.suspend(
                self.fence, batch, resume, wake_at, wait_ids, children,
            ))
        except (errors.WaitNotOpen, errors.CancelRequested) as exc:
            if isinstance(exc, errors.CancelRequested):
                self._cancel_requested = True
            for blocker in list(self._blocked):
                blocker.wake()  # an event arrived or a child ended meanwhile: go and read it
            return
        except errors.SteadError as exc:
            log.warning("run %s could not suspend: %s", self.fence.run_id, exc)
            return
        self._suspended = True
        log.info("run %s suspended until %s", self.fence.run_id,
                 "an event" if wake_at is None else f"{logs.iso(wake_at)} or an event")
        if self._body is not None:
            self._body.cancel()


class _Blocker:
    __slots__ = ("child_id", "future", "wait_id", "wake_at")

    def __init__(self, wake_at: float | None, wait_id: str | None,
                 future: asyncio.Future[None], child_id: str | None = None) -> None:
        self.wake_at = wake_at
        self.wait_id = wait_id
        self.future = future
        self.child_id = child_id

    def wake(self) -> None:
        if not self.future.done():
            self.future.set_result(None)
