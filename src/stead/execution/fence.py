"""`Fenced`: one worker's attempt at one run as it stands (the fence it
writes under, the journal it replays, what the takeover found), and whether
it may still act: a lost lease, a store error, changed code, a drain, a
cancel or a passed deadline stops it at the next call boundary, waking the
branches parked meanwhile (`Blocker`)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from stead import addresses, codec, digests, errors, stepcode
from stead.execution.exits import Drain, Frontier, Stop
from stead.records import RunStatus

# Annotations only: a run without intent, policy or waits loads none of
# their modules (`stead worker` starts without them).
if TYPE_CHECKING:
    from stead import keys
    from stead.clock import Clock
    from stead.execution.options import ExecutionOptions, Judge
    from stead.guard import Guard
    from stead.intent import Matcher
    from stead.policy import Action
    from stead.records import EventRow, Fence, Record, ResumeClass, WaitRow
    from stead.replay import Journal
    from stead.store.base import Store

T = TypeVar("T")


class Fenced:
    """The state of an attempt, and the checks made before it acts live."""

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
        self._quiet: asyncio.Event | None = None  # set when nothing is in flight
        self._sending_in_thread = 0  # sync effect functions running in threads now
        self._suspended = False
        # The attempt's last write (its finish, or its suspension) is sent:
        # read from the lease keeper's thread (see `ending`).
        self._ending = False
        self._body: asyncio.Task[Any] | None = None
        self._suspend_after = options.suspend_after
        self._recheck_every = options.recheck_every
        self._keyring = options.keyring
        self._standing = options.standing
        self.dry = options.dry
        # Until when (monotonic) the previous holder of the run, taken for
        # dead by its presence alone, may still be alive and sending (see
        # `RunRow.prior_lease_until`); None: it is known gone, or never was.
        self.previous_holder_until: float | None = None
        # What a takeover does with a step whose body changed (`App(changed_steps=)`).
        self.changed_steps = stepcode.ChangedSteps.WARN
        # Whether a model call's request (its messages and parameters) is
        # stored with its record (`App(keep_conversation=)`).
        self.keep_conversation = True
        # In a dry replay: the last call the journal did not know ("kind 'name' at addr").
        self.frontier: str | None = None
        # The run's live wait tokens: values holding one are never stored.
        self.secrets = codec.Secrets()
        self.max_result_bytes = options.max_result_bytes
        self._blocked: set[Blocker] = set()
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
        # when the run wakes (see `stead.workflow.waits`).
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
        # `stead.workflow.workspaces`): the resume record lists them.
        self.restored: dict[str, dict[str, Any]] = {}
        # Consumed waits the takeover read with the journal (the one an event
        # consumed last), with their events, by wait id: a consumed wait and
        # its event never change, so its replay reads them here, once,
        # rather than from the store (see `stead.workflow.waits`).
        self.consumed_waits: dict[str, tuple[WaitRow, EventRow | None]] = {}
        # The task state the takeover read, and when the run was claimed
        # (see `ResumeDetails.world`, `claimed_at`).
        self.world: dict[str, Any] | None = None
        self.claimed_at: float | None = None
        # When the run fails if it has not ended (None: never), and whether
        # someone asked to cancel it: both take effect at a call boundary.
        self.deadline: float | None = None
        self._cancel_requested = False
        # Effects between their intent and their outcome: a stopping run
        # waits for them, so no outcome is left unjournaled.
        self._effects_open = 0
        self._effects_settled: asyncio.Event | None = None
        # The tenant the run serves, read by its first live model call (see
        # `tenant`); a list holding it once read.
        self._tenant: list[str | None] = []

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
    def ending(self) -> bool:
        """Whether the attempt's last write (its finish, or its suspension)
        has been sent: a lease found gone from then on may be that write's
        own doing, and the write's outcome says whether the lease held
        (acknowledged: the attempt ended; `StaleLease`: it was lost). Read
        from the lease keeper's thread."""
        return self._ending

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

    async def act(self, *, boundary: bool = True) -> None:
        """Before a call that reaches outside (a step, a model call, an
        effect's send or check): `check_live`, after waiting while the worker
        cannot be sure it still holds its leases (its presence lock lost, or
        its last renewal too old), so a run whose lease was lost meanwhile
        starts nothing."""
        self.check_live(boundary=boundary)
        standing = self._standing
        if standing is not None and not standing.sure() and not self.dry:
            await standing.regained()
            self.check_live(boundary=boundary)

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

    async def tenant(self) -> str | None:
        """The tenant the run serves (None: none), read once per attempt, by
        the first live model call: a tenant's calls reserve their spend."""
        if not self._tenant:
            self._tenant.append(await self.store.run_tenant(self.fence.run_id))
        return self._tenant[0]

    async def keyring(self) -> keys.Keyring:
        if self._keyring is None:
            raise errors.KeysUnavailable("no keys to sign wait tokens: waits need a worker "
                                         "to run them")
        return await self._keyring()

    def drain(self) -> None:
        """The worker is stopping: parked branches wake to meet `Drain`."""
        self._draining = True
        for blocker in list(self._blocked):
            blocker.wake()


class Blocker:
    """A parked branch of the run (see `Parking.block`)."""

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
