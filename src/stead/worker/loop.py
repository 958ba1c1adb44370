"""`Worker`: the claim loop. It claims runnable runs (see `claims`), executes
them on one event loop (each attempt: `attempts`), keeps their leases alive
(from a thread, see `leases`), fires the app's schedules, backs off after
store errors, and gives its runs back when it stops.

A graceful stop (SIGTERM) stops claiming and lets each run reach its next call
boundary, where it is released with everything it acknowledged journaled; what
is still running after the grace period is cancelled and released.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

from stead import addresses, errors, logs, takeover, waiting, warmups
from stead.app import App
from stead.clock import Clock, SystemClock
from stead.execution import Execution, ExecutionOptions
from stead.metrics import meters
from stead.metrics.meters import Takeover
from stead.records import Backlog, Fence, RunRow, RunStatus
from stead.store import local_work, seam
from stead.store.base import Store
from stead.worker import attempts, chores, claims, heap, holds, idle, leases, leftovers
from stead.worker.leases import LeaseKeeper
from stead.worker.options import WorkerOptions
from stead.worker.standing import Standing

log = logging.getLogger("stead.worker")




class Worker:
    def __init__(
        self,
        app: App,
        store: Store,
        options: WorkerOptions | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.app = app
        self.store = store
        self.options = options or WorkerOptions()
        self.clock = clock or store.clock or SystemClock()
        self.id = self.options.worker_id or (
            f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        )
        self._active: dict[str, tuple[asyncio.Task[None], Execution | None]] = {}
        self._stopping = asyncio.Event()
        self._wake = waiting.Bell()
        # Whether this worker is sure it still holds its leases: its runs
        # start no call that reaches outside while it is not (see `standing`).
        standing = Standing(self.options.lease_seconds)
        self._execution_options = ExecutionOptions(
            suspend_after=self.options.suspend_after, keyring=self.store.keyring,
            max_result_bytes=self.options.max_result_bytes, standing=standing,
        )
        # What it claims, and how much at a time.
        self._holds = holds.Holds(self.options.concurrency)
        self._claims = claims.Claims(app, store, self.clock, self.id, self.options,
                                     stop_for=self._stop_for, holds=self._holds)
        self._leases = LeaseKeeper(store, self.options.lease_seconds, on_lost=self._lost,
                                   blocked_after=self.options.blocked_after,
                                   on_cancel=self._cancel_requested,
                                   worker_id=self.id, on_freed=self._wake.set,
                                   standing=standing,
                                   presence_grace=self.options.presence_grace,
                                   fleet=lambda: self._claims.peers)
        # Runs this worker leaves alone for a while after a store error: run id
        # -> (until when, by loop time; the pause the next error starts).
        self._backoff: dict[str, tuple[float, float]] = {}
        self._claim_pause = 0.0
        # Each schedule's next tick as last read: firing is tried once it is due.
        self._next_ticks: dict[str, float] = {}
        # What stopped the worker by itself (a missing key): raised once it drained.
        self._stopped_by: errors.SteadError | None = None
        # Its offer to take runs straight from deliveries made in this process
        # (`local_work`), made when its loop starts.
        self._taker: local_work.Taker | None = None
        self._releasing: set[asyncio.Task[bool]] = set()  # runs handed to it as it stopped
        self._leftovers = leftovers.Leftovers()
        self._drain_asked = False  # `stead workers drain` asked it to stop

    # -- public -------------------------------------------------------------
    async def run(self) -> None:
        """Work until `stop()` (or SIGTERM, when started by `stead worker`)."""
        await self._loop(None)

    async def run_until_idle(self) -> None:
        """Work until no run is executing and none can be claimed, now or soon:
        a hosted run leased to another worker that does not renew the lease (a
        crashed one) is waited for, and taken over when the lease ends."""
        seen: dict[tuple[str, int], float | None] = {}
        await self._loop(lambda: self._nothing_left(seen), wait_for_runs=True)

    async def run_until_done(self, run_ids: Sequence[str], *,
                             timeout: float | None = None) -> bool:
        """Work until each of `run_ids` has ended or stopped for a person
        (completed, failed, cancelled, stopped for a decision, or waiting for
        an event); False if `timeout` seconds passed first. Leases of a crashed
        worker are waited out, and its runs taken over."""
        for run_id in run_ids:
            await self.store.get_run(run_id)  # UnknownRun before any work
        left = set(run_ids)
        deadline = None if timeout is None else time.monotonic() + timeout

        async def finished() -> bool:
            for run_id in sorted(left):
                if await idle.settled(self.store, await self.store.get_run(run_id)):
                    left.discard(run_id)
            return not left or (deadline is not None and time.monotonic() >= deadline)

        await self._loop(finished)
        return not left

    async def unhosted(self) -> list[Backlog]:
        """Runs a worker could take now that this worker does not host, by
        `workflow@version`."""
        hosted = set(self._claims.claimable)
        return [b for b in await self.store.backlog() if b.runnable and b.code not in hosted]

    def stop(self) -> None:
        """Stop claiming; running runs are released at their next call boundary."""
        self._stopping.set()
        self._wake.set()
        for _task, execution in self._active.values():
            if execution is not None:
                execution.drain()

    # -- loop ---------------------------------------------------------------
    async def _loop(self, finished: Callable[[], Awaitable[bool]] | None, *,
                    wait_for_runs: bool = False) -> None:
        """Claim and execute until stopped, or until `finished()` says so when
        nothing was claimed. `wait_for_runs`: while runs execute, idle until one
        ends rather than polling the store."""
        addresses.install(asyncio.get_running_loop())
        named = logs.current_worker.set(self.id)  # every line of its loop names it
        try:
            await self._work(finished, wait_for_runs)
        finally:
            logs.current_worker.reset(named)

    async def _work(self, finished: Callable[[], Awaitable[bool]] | None,
                    wait_for_runs: bool) -> None:
        self._taker = local_work.Taker(self.id, self.options.lease_seconds, self._handed)
        await warmups.ready()  # the SDKs' schemas, built off the loop before any run
        if self.options.freeze_heap:
            heap.settle()
        await self._leases.start()
        await self._claims.beat()
        beating = asyncio.create_task(self._claims.heartbeats(), name=f"stead heartbeat {self.id}")
        watching = asyncio.create_task(self._drain_watch(), name=f"stead drain watch {self.id}")
        warming: asyncio.Task[None] | None = None
        try:
            while not self._stopping.is_set():
                # Cleared before the free slots are counted, not when the loop
                # goes idle: a run that ends while this claim is made (its
                # slot not counted free) wakes the next `_idle` at once.
                self._wake.clear()
                await self._fire_schedules()
                if self._leftovers:
                    await self._leftovers.release(self.store)
                pending = self._taker.pending  # slots deliveries reserved, not yet handed
                free = self.options.concurrency - len(self._active) - pending
                batch = self._claims.batch(free)
                claimed: list[RunRow] = []
                backing_off = self._backing_off()
                # Taken before the claim looks: what is committed while it
                # looks wakes the wait after it (see `Store.work_mark`).
                mark = await self.store.work_mark()
                if free > 0:
                    began = time.perf_counter()
                    try:
                        claimed = await self._claims.claim(batch, [*self._active, *backing_off],
                                                           spare=free - batch)
                        self._claim_pause = 0.0
                        meters.claimed(time.perf_counter() - began, len(claimed))
                    except errors.DatabaseMissing as exc:
                        meters.store_error(exc)
                        log.error("worker %s stops: %s", self.id, exc)
                        raise
                    except errors.StoreUnavailable as exc:
                        meters.store_error(exc)
                        # Locked or briefly unreachable: nothing was claimed; poll again.
                        log.warning("worker %s could not claim: %s", self.id, exc)
                        await self._pause_claims()
                for row in claimed:
                    self._spawn(row)
                if claimed and len(claimed) == free:
                    continue
                if claimed and batch < free:
                    # A small batch taken while peers are live: step aside until
                    # the store changes (a peer claims, a run is started) or the
                    # next poll, so that a burst of runs spreads across the fleet.
                    await self._idle(False, mark)
                    continue
                # A run that ended while the claim was made (its slot, or its
                # tenant's or queue's, not free to that claim) set the wake:
                # claim again before asking whether anything is left.
                if (finished is not None and not claimed and not backing_off and not pending
                        and not self._leftovers and not self._wake.is_set()
                        and await self._ask(finished)):
                    return
                # Fewer than asked for (or none): the store has nothing more
                # for now. Claiming again at once would only find that out
                # again, ahead of the runs just claimed; news of work, a run
                # ending or the poll bring the next claim.
                if warming is None and not self._active:  # nothing to do: get ready
                    warming = asyncio.create_task(warmups.idle(),
                                                  name=f"stead warm-up {self.id}")
                await self._idle(wait_for_runs, mark)
        finally:
            self._taker = None  # a run handed to it from now on is released (`_handed`)
            await chores.end(beating, watching, *([] if warming is None else [warming]))
            try:
                await self._drain()
            finally:
                try:
                    with contextlib.suppress(errors.StoreError):
                        await self.store.host_stopped(self.id)
                        if self._drain_asked:  # the request is done with
                            await self.store.forget_drain(self.id)
                finally:
                    await self._leases.stop()
        if self._stopped_by is not None:
            raise self._stopped_by

    async def _drain_watch(self) -> None:
        """Stop as SIGTERM does once `stead workers drain` asks (from any host:
        the request is in the store)."""
        while True:
            await asyncio.sleep(self.options.drain_check)
            try:
                asked = await self.store.drain_requested(self.id)
            except errors.StoreError as exc:
                log.warning("worker %s could not look for a drain request: %s", self.id, exc)
                continue
            if asked is not None:
                self._drain_asked = True
                log.info("worker %s: drain requested (%s), stopping (no new claims; runs are "
                         "released at their next call boundary)", self.id, asked)
                self.stop()
                return

    async def _ask(self, finished: Callable[[], Awaitable[bool]]) -> bool:
        try:
            return await finished()
        except errors.StoreUnavailable as exc:
            log.warning("worker %s could not read the store: %s", self.id, exc)
            return False

    async def _nothing_left(self, seen: dict[tuple[str, int], float | None]) -> bool:
        """Whether there is nothing to wait for: no run executing here, and
        nothing else left (see `idle.nothing_left`)."""
        if self._active:
            return False
        return await idle.nothing_left(self.store, self.app, self.id,
                                       self.options.lease_seconds, seen)

    async def _idle(self, wait_for_runs: bool, since: seam.WorkMark | None = None) -> None:
        """Wait for a run to finish, a stop, news of work from the store, or the
        next poll (or at once if one came since the loop counted its free
        slots, or news since `since`, the mark taken before the last claim)."""
        if self._stopping.is_set():
            return
        timeout = None if wait_for_runs and self._active else self.options.poll_interval
        # News of work rings `news` as it comes (a commit seen, NOTIFY, a
        # delivery of this process), and a run ending rings `_wake`: the wait
        # ends within the step that hears it (see `stead.waiting.Bell`).
        news = waiting.Bell()
        waiters: list[Awaitable[object]] = []
        if timeout is not None:
            waiters.append(self.store.wait_for_work(timeout, ring=news.set, since=since))
        local, taker = self.store.database.local, self._taker
        free = self.options.concurrency - len(self._active)
        offer = contextlib.nullcontext() if local is None or taker is None else \
            local.offering(taker, free - taker.pending, frozenset(self._claims.claimable))
        with offer:
            # In few turns of the loop: a newcomer's run waits for them while
            # the worker drives a wave of quick runs (see `stead.waiting`).
            await waiting.first(*waiters, bells=(self._wake, news), timeout=timeout)

    def _handed(self, row: RunRow) -> None:
        """A delivery of this process leased `row` to this worker (see
        `local_work`): execute it, as if claimed; a worker that is stopping
        gives it back at once, for another worker to take."""
        if self._taker is None or self._stopping.is_set() or row.run_id in self._active:
            fence = Fence(row.run_id, row.epoch, self.id)
            task = asyncio.ensure_future(attempts.release_quietly(self.store, fence))
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)
            return
        self._spawn(row)
        self._wake.set()

    def _spawn(self, row: RunRow) -> None:
        # The worker's own context has no branch; the run's body starts in its
        # root branch (see Execution.start), so its tasks are numbered from zero.
        context = contextvars.copy_context()
        context.run(logs.current_run.set, row.run_id)
        context.run(logs.current_attempt.set,
                    logs.Attempt(row.epoch, self.id, f"{row.workflow}@{row.version}"))
        # Its writes are tried on past the store's retry bound while this
        # worker is sure it holds its leases (see `stead.store.seam.lease_held`).
        context.run(seam.lease_held.set, self._leases.standing.sure)
        task = asyncio.create_task(self._execute(row), context=context,
                                   name=leases.task_name(row.run_id))
        self._active[row.run_id] = (task, None)
        self._holds.began(row.run_id, time.monotonic())
        run_id = row.run_id
        task.add_done_callback(lambda t: self._done(run_id, t))

    def _done(self, run_id: str, task: asyncio.Task[None]) -> None:
        self._active.pop(run_id, None)
        self._holds.ended(run_id, time.monotonic())
        if not task.cancelled() and (exc := task.exception()) is not None:
            # Only a BaseException gets here (a process-level interrupt in step
            # code): the run keeps its lease until it expires, then is taken over.
            log.error("run %s: execution died: %r", run_id, exc)
        self._wake.set()

    async def _drain(self) -> None:
        if not self._active:
            return
        for _task, execution in self._active.values():
            if execution is not None:
                execution.drain()
        executions = {t: x for t, x in self._active.values()}
        tasks = list(executions)
        _done, pending = await asyncio.wait(tasks, timeout=self.options.shutdown_grace)
        for t in pending:
            x = executions[t]
            if x is not None and x.sending_in_thread:
                # A sync effect runs in a thread no one can stop, and the process
                # cannot exit before it returns: wait for it and journal its
                # outcome, rather than leave a known outcome to be reconciled.
                log.warning("run %s: waiting past the grace period for an effect in "
                            "flight, to journal its outcome", x.fence.run_id)
                continue
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _lost(self, fences: list[Fence]) -> None:
        """The lease keeper found these leases lost (on the worker's loop)."""
        for fence in fences:
            entry = self._active.get(fence.run_id)
            if entry is None or entry[1] is None or entry[1].fence != fence:
                continue  # that attempt is over already
            meters.takeover(Takeover.LEASE_EXPIRY)
            log.warning("worker %s lost run %s (epoch %d)", self.id, fence.run_id, fence.epoch,
                        extra={"run_id": fence.run_id})
            entry[1].lose(errors.StaleLease(f"lease on run {fence.run_id} was lost"))
            entry[0].cancel()

    def _cancel_requested(self, run_ids: list[str]) -> None:
        """Someone asked to cancel these runs (found at a lease renewal): each
        stops at its next call boundary."""
        for run_id in run_ids:
            entry = self._active.get(run_id)
            if entry is not None and entry[1] is not None and not entry[1].cancel_requested:
                log.info("run %s: cancel requested; it stops at its next call boundary",
                         run_id, extra={"run_id": run_id})
                entry[1].request_cancel()

    async def _fire_schedules(self) -> None:
        """Start the runs of the app's schedules whose tick is due (each tick
        once across every worker: see `Store.fire_schedule`)."""
        now = self.clock.now()
        for sched in self.app.schedules:
            known = self._next_ticks.get(sched.name)
            if known is not None and now < known:
                continue
            try:
                started, next_tick = await self.store.fire_schedule(
                    sched.name, sched.cron, sched.due, sched.new_run)
            except errors.StoreUnavailable as exc:
                log.warning("worker %s could not fire schedule %s: %s", self.id, sched.name,
                            exc)
                continue
            self._next_ticks[sched.name] = next_tick
            for tick, row in started:
                log.info("schedule %s: tick %s started run %s", sched.name, tick, row.run_id,
                         extra={"run_id": row.run_id})

    # -- after a store error ----------------------------------------------------
    def _backing_off(self) -> list[str]:
        """The runs this worker leaves alone for now, after a store error."""
        now = asyncio.get_running_loop().time()
        return [run_id for run_id, (until, _pause) in self._backoff.items() if until > now]

    def _back_off(self, run_id: str) -> None:
        _until, pause = self._backoff.get(run_id, (0.0, self.options.store_backoff))
        self._backoff[run_id] = (asyncio.get_running_loop().time() + pause,
                                 min(pause * 2, self.options.lease_seconds))

    async def _pause_claims(self) -> None:
        """Wait before the next claim after a failed one (doubling, up to the lease)."""
        self._claim_pause = min(max(self._claim_pause * 2, self.options.store_backoff),
                                self.options.lease_seconds)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), self._claim_pause)

    # -- one run --------------------------------------------------------------
    async def _execute(self, row: RunRow) -> None:
        fence = Fence(row.run_id, row.epoch, self.id)
        self._leases.hold(fence)
        execution: Execution | None = None
        if row.epoch > 1:
            meters.resumed()
        try:
            ready = await takeover.prepare(self.app, self.store, self.clock, row, self.id,
                                           self._execution_options)
            if isinstance(ready, takeover.Stopped):
                await attempts.finish_stopped(self.store, fence, ready)
                return
            execution = ready.execution
            task = self._active.get(row.run_id)
            if task is not None:
                self._active[row.run_id] = (task[0], execution)
            self._previous_holder(row, ready.execution)
            if self._stopping.is_set():
                # The stop came while the run was being taken over: `stop()`
                # had no execution to drain, so it would run on to the end.
                ready.execution.drain()
            self._leases.track(fence, execution.in_flight, _ending_of(execution))
            await attempts.advance(self.store, self.id, row, ready)
            self._backoff.pop(row.run_id, None)
        except errors.StaleLease as exc:
            meters.refused()
            log.warning("run %s: %s", row.run_id, exc)
        except errors.KeysUnavailable as exc:
            # The deployment has no key, which no retry brings: every run that
            # opens a wait with a token would meet it again, so the worker
            # stops (the run is released, for a worker that has the key).
            await attempts.release_quietly(self.store, fence)
            self._stop_for(f"run {row.run_id} opens a wait with a token: {exc}", exc)
        except errors.StoreRejected as exc:
            meters.store_error(exc)
            await self._rejected(fence, exc)
        except errors.StoreError as exc:
            meters.store_error(exc)
            # A store error is never the workflow's failure: stop this attempt
            # and leave the run to be taken over (released now if the store
            # lets us, else when its lease expires), nothing lost. This worker
            # leaves it alone for a while, so a failing store is not hammered.
            # Its calls still in flight (a sibling branch's step in a thread)
            # end first, the lease kept meanwhile: released sooner, the run's
            # next holder would run them again while this worker lives.
            log.error("run %s: store error, leaving the run to be taken over: %s",
                      row.run_id, exc)
            self._back_off(row.run_id)
            if execution is not None:
                await execution.calls_settled()
            if not await attempts.release_quietly(self.store, fence):
                self._leftovers.keep(fence)
        except asyncio.CancelledError:
            await attempts.release_quietly(self.store, fence)
            raise
        finally:
            self._leases.drop(fence)

    def _previous_holder(self, row: RunRow, execution: Execution) -> None:
        """Tell the execution until when the run's previous holder may still
        be sending, if it was taken for dead by its presence alone: its lease
        would have run out at `prior_lease_until`, on the database's clock,
        which this claim read as its own lease's start."""
        until, expires = row.prior_lease_until, row.lease_expires_at
        if until is None or expires is None:
            return
        left = until - (expires - self.options.lease_seconds)
        if left > 0:
            execution.previous_holder_until = time.monotonic() + left

    async def _rejected(self, fence: Fence, exc: errors.StoreRejected) -> None:
        """The database refused a write for good: taken over, the run would
        make the same write and be refused again, every lease, forever. It
        fails, with the database's reason (or, if even that is refused, it is
        left to be taken over as after any store error)."""
        log.error("run %s: the store refused a write for good, failing the run: %s",
                  fence.run_id, exc)
        try:
            await self.store.finish(fence, RunStatus.FAILED, error=attempts.error_json(exc))
        except errors.StoreError as again:
            log.error("run %s: failing it was refused too, leaving it to be taken over: %s",
                      fence.run_id, again)
            self._back_off(fence.run_id)
            await attempts.release_quietly(self.store, fence)

    def _stop_for(self, why: str, exc: errors.SteadError) -> None:
        """Stop the worker (once) for a reason no retry mends, saying it in
        one line; `run()` raises `exc` once the worker has drained."""
        if self._stopped_by is None:
            log.error("worker %s stops: %s", self.id, why)
            self._stopped_by = exc
            self.stop()


def _ending_of(execution: Execution) -> Callable[[], bool]:
    """Whether `execution`'s last write is sent (for the lease keeper's thread)."""
    def ending() -> bool:
        return execution.ending

    return ending
