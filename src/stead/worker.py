"""`Worker`: claims runnable runs, executes them on one event loop, keeps
their leases alive (from a thread, see `leases`) and gives them back when it
stops.

A graceful stop (SIGTERM) stops claiming and lets each run reach its next call
boundary, where it is released with everything it acknowledged journaled; what
is still running after the grace period is cancelled and released.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import json
import logging
import os
import socket
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from stead import addresses, bounds, codec, errors, leases, logs, takeover, tracing, warmups
from stead.app import App
from stead.clock import Clock, SystemClock
from stead.execution import Continued, Drain, Execution, ExecutionOptions, Stop
from stead.leases import LeaseKeeper
from stead.queues import Queue
from stead.records import (
    STOPPED,
    TERMINAL,
    Backlog,
    Fence,
    HostRole,
    HostRow,
    RunRow,
    RunStatus,
    WaitState,
)
from stead.run import Run
from stead.store.base import Store

log = logging.getLogger("stead.worker")


@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    concurrency: int = 16
    lease_seconds: float = 30.0
    # Idle workers wake at once on PostgreSQL (NOTIFY) and SQLite (data_version);
    # the poll catches timers that come due.
    poll_interval: float = 0.2
    shutdown_grace: float = 10.0
    worker_id: str | None = None
    # A run parked on a wait or timer further away than this is suspended
    # (lease released, no worker held); nearer ones sleep in the process.
    suspend_after: float = 1.0
    # After a store error, this worker leaves the run alone this long (doubling
    # with each error in a row, up to the lease) and pauses its claims alike.
    store_backoff: float = 1.0
    # An event loop held this long by one call (no await) is logged.
    blocked_after: float = 1.0
    # The largest result (of a step, effect or model call) journaled, as JSON:
    # a larger one raises `ResultTooLarge` in the workflow, naming the call.
    max_result_bytes: int = 16 * 1024 * 1024
    # How often the worker tells the store which versions it serves (see
    # `Store.heartbeat`); one not heard from for 3 heartbeats is taken as gone.
    heartbeat: float = 10.0

    def __post_init__(self) -> None:
        bounds.integer(self.concurrency, "WorkerOptions.concurrency", least=1,
                       most=bounds.MAX_INT32)
        bounds.integer(self.max_result_bytes, "WorkerOptions.max_result_bytes", least=1)
        bounds.optional_text(self.worker_id, "WorkerOptions.worker_id")
        for name in ("lease_seconds", "poll_interval", "heartbeat", "blocked_after"):
            bounds.seconds(getattr(self, name), f"WorkerOptions.{name}")
        for name in ("shutdown_grace", "store_backoff", "suspend_after"):
            bounds.seconds(getattr(self, name), f"WorkerOptions.{name}", zero=True)


def _error_json(exc: BaseException) -> str:
    return json.dumps({
        "type": type(exc).__qualname__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc))[-4000:],
    })


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
        self._wake = asyncio.Event()
        self._execution_options = ExecutionOptions(
            suspend_after=self.options.suspend_after, keyring=self.store.keyring,
            max_result_bytes=self.options.max_result_bytes,
        )
        self._leases = LeaseKeeper(store, self.options.lease_seconds, on_lost=self._lost,
                                   blocked_after=self.options.blocked_after,
                                   on_cancel=self._cancel_requested,
                                   worker_id=self.id, on_freed=self._wake.set)
        # Runs this worker leaves alone for a while after a store error: run id
        # -> (until when, by loop time; the pause the next error starts).
        self._backoff: dict[str, tuple[float, float]] = {}
        self._claim_pause = 0.0
        # What this worker claims: the versions it hosts, and those it can
        # migrate to one of them that no other live worker hosts (refreshed
        # at each heartbeat).
        self._claimable: list[str] = app.hosted()
        # Other live workers that claim some of the same versions (refreshed
        # at each heartbeat): with any, claims come in small batches (`_batch`).
        self._peers = 0
        # Each schedule's next tick as last read: firing is tried once it is due.
        self._next_ticks: dict[str, float] = {}
        self._queue_turn = 0  # which of the app's queues the next claim starts with
        # What stopped the worker by itself (a missing key): raised once it drained.
        self._stopped_by: errors.SteadError | None = None

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
                if await self._settled(await self.store.get_run(run_id)):
                    left.discard(run_id)
            return not left or (deadline is not None and time.monotonic() >= deadline)

        await self._loop(finished)
        return not left

    async def unhosted(self) -> list[Backlog]:
        """Runs a worker could take now that this worker does not host, by
        `workflow@version`."""
        hosted = set(self._claimable)
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
        await warmups.ready()  # the SDKs' schemas, built off the loop before any run
        await self._leases.start()
        await self._beat()
        beating = asyncio.create_task(self._heartbeats(), name=f"stead heartbeat {self.id}")
        try:
            while not self._stopping.is_set():
                await self._fire_schedules()
                free = self.options.concurrency - len(self._active)
                batch = self._batch(free)
                claimed: list[RunRow] = []
                backing_off = self._backing_off()
                if free > 0:
                    try:
                        claimed = await self._claim(batch, [*self._active, *backing_off])
                        self._claim_pause = 0.0
                    except errors.DatabaseMissing as exc:
                        log.error("worker %s stops: %s", self.id, exc)
                        raise
                    except errors.StoreUnavailable as exc:
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
                    await self._idle(False)
                    continue
                if (finished is not None and not claimed and not backing_off
                        and await self._ask(finished)):
                    return
                if claimed:
                    continue
                await self._idle(wait_for_runs)
        finally:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)
            try:
                await self._drain()
            finally:
                try:
                    with contextlib.suppress(errors.StoreError):
                        await self.store.host_stopped(self.id)
                finally:
                    await self._leases.stop()
        if self._stopped_by is not None:
            raise self._stopped_by

    # -- heartbeats -------------------------------------------------------------
    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.options.heartbeat)
            await self._beat()

    async def _beat(self) -> None:
        """Tell the store which versions this worker serves, after deciding
        which it migrates: those no other live worker hosts (a run goes on
        on its own version while one does)."""
        migrated = self.app.migrated()
        try:
            now = self.clock.now()
            live = [h for h in await self.store.worker_hosts()
                    if h.worker_id != self.id and self._alive(h, now)]
            others = {h.code for h in live if h.role == HostRole.HOSTS}
            migrated = [code for code in migrated if code not in others]
            self._claimable = [*self.app.hosted(), *migrated]
            claimable = set(self._claimable)
            peers = len({h.worker_id for h in live if h.code in claimable})
            if peers != self._peers:
                log.info("worker %s shares its versions with %d other live worker(s)",
                         self.id, peers)
            self._peers = peers
            policy = self.app.current_policy
            await self.store.heartbeat(
                self.id, [*((c, HostRole.HOSTS) for c in self.app.hosted()),
                          *((c, HostRole.MIGRATES) for c in migrated)],
                policy_version=None if policy is None else policy.version,
                live_for=3 * self.options.heartbeat)
        except errors.StoreError as exc:
            log.warning("worker %s could not send its heartbeat: %s", self.id, exc)

    def _alive(self, host: HostRow, now: float) -> bool:
        """Whether `host` is live, judged by the interval it published (its own
        `live_until`): workers of one fleet may beat at different rates. A row
        without one (written before workers published it) falls back to this
        worker's own interval."""
        if host.stopped_at is not None:
            return False
        if host.live_until is not None:
            return host.live_until > now
        return host.seen_at > now - 3 * self.options.heartbeat

    def _batch(self, free: int) -> int:
        """How many runs one claim takes: every free slot when this worker is
        alone; with live peers a quarter of its fair share of the free slots
        (at least one), so that the first worker to wake does not take a
        whole burst while the others stay idle."""
        if self._peers == 0:
            return free
        return max(1, free // (4 * (self._peers + 1)))

    async def _claim(self, free: int, exclude: list[str]) -> list[RunRow]:
        """Runs of the app's queues first (each under its limits), then runs
        in no queue, up to `free`."""
        # The versions it hosts, and those it migrates that no other live worker hosts.
        hosted, lease = self._claimable, self.options.lease_seconds
        claimed: list[RunRow] = []
        for queue in self._queues():
            if len(claimed) < free:
                claimed += await self.store.claim_queue(
                    queue, self.id, hosted, lease, free - len(claimed), exclude)
        if len(claimed) < free:
            claimed += await self.store.claim(self.id, hosted, lease, free - len(claimed),
                                              exclude=exclude)
        return claimed

    def _queues(self) -> list[Queue]:
        """The app's queues, starting one further at each claim, so that a
        busy queue does not always take the free slots before the others."""
        declared = list(self.app.queues.values())
        if not declared:
            return declared
        self._queue_turn = (self._queue_turn + 1) % len(declared)
        return declared[self._queue_turn:] + declared[:self._queue_turn]

    async def _ask(self, finished: Callable[[], Awaitable[bool]]) -> bool:
        try:
            return await finished()
        except errors.StoreUnavailable as exc:
            log.warning("worker %s could not read the store: %s", self.id, exc)
            return False

    async def _nothing_left(self, seen: dict[tuple[str, int], float | None]) -> bool:
        """Whether there is nothing to wait for: no run executing here, and no
        hosted run leased to another worker that has not renewed the lease
        since `seen` (its first sighting) and will lose it within a lease
        time. Our own leftovers (an execution that died) are not waited for.
        A lease seen before that has ended by now may have ended after the
        last claim looked: one more claim is made before the worker is idle."""
        if self._active:
            return False
        for queue in self.app.queues.values():  # runs its limits hold back for now
            if await self.store.queue_ready(queue, self.app.hosted()):
                return False
        hosted = set(self.app.hosted())
        leased = await self.store.leased_runs()
        # The clock lease ends are on, read after the leases: one that ends
        # between the two reads is still listed, and waited for.
        now = await self.store.lease_now()
        horizon = now + self.options.lease_seconds
        waiting = False
        current = {(row.run_id, row.epoch) for row in leased}
        gone = [key for key, expires in seen.items()
                if key not in current and (expires is None or expires <= now)]
        for key in gone:
            del seen[key]
        if gone:
            return False
        for row in leased:
            if f"{row.workflow}@{row.version}" not in hosted or row.lease_owner == self.id:
                continue
            key = (row.run_id, row.epoch)
            expires = row.lease_expires_at
            if key not in seen:
                seen[key] = expires
                log.info("worker %s: run %s is leased to %s for %.1fs more; waiting to see "
                         "whether that worker renews the lease", self.id, row.run_id,
                         row.lease_owner, (expires or now) - now)
            if expires is not None and expires <= horizon and expires == seen[key]:
                waiting = True  # not renewed since first seen: its worker is likely gone
        return not waiting

    async def _settled(self, row: RunRow) -> bool:
        """Ended, stopped for a decision, or waiting for an event (not a timer)."""
        if row.status in TERMINAL or row.status in STOPPED:
            return True
        if row.status != RunStatus.WAITING:
            return False
        return bool(await self.store.list_waits(run_id=row.run_id, state=WaitState.OPEN,
                                                limit=1))

    async def _idle(self, wait_for_runs: bool) -> None:
        """Wait for a run to finish, a stop, news of work from the store, or the
        next poll."""
        self._wake.clear()
        if self._stopping.is_set():  # stop() came while we claimed: its wake was cleared
            return
        timeout = None if wait_for_runs and self._active else self.options.poll_interval
        waiters: set[asyncio.Task[Any]] = {asyncio.create_task(self._wake.wait())}
        if timeout is not None:
            waiters.add(asyncio.create_task(self.store.wait_for_work(timeout)))
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    def _spawn(self, row: RunRow) -> None:
        # The worker's own context has no branch; the run's body starts in its
        # root branch (see Execution.start), so its tasks are numbered from zero.
        context = contextvars.copy_context()
        context.run(logs.current_run.set, row.run_id)
        task = asyncio.create_task(self._execute(row), context=context,
                                   name=leases.task_name(row.run_id))
        self._active[row.run_id] = (task, None)
        run_id = row.run_id
        task.add_done_callback(lambda t: self._done(run_id, t))

    def _done(self, run_id: str, task: asyncio.Task[None]) -> None:
        self._active.pop(run_id, None)
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
        try:
            ready = await takeover.prepare(self.app, self.store, self.clock, row, self.id,
                                           self._execution_options)
            if isinstance(ready, takeover.Stopped):
                await self._stop(fence, ready)
                return
            task = self._active.get(row.run_id)
            if task is not None:
                self._active[row.run_id] = (task[0], ready.execution)
            if self._stopping.is_set():
                # The stop came while the run was being taken over: `stop()`
                # had no execution to drain, so it would run on to the end.
                ready.execution.drain()
            self._leases.track(fence, ready.execution.in_flight)
            await self._advance(row, ready)
            self._backoff.pop(row.run_id, None)
        except errors.StaleLease as exc:
            log.warning("run %s: %s", row.run_id, exc)
        except errors.KeysUnavailable as exc:
            # The deployment has no key, which no retry brings: every run that
            # opens a wait with a token would meet it again, so the worker
            # stops (the run is released, for a worker that has the key).
            await self._release_quietly(fence)
            self._stop_for(f"run {row.run_id} opens a wait with a token: {exc}", exc)
        except errors.StoreRejected as exc:
            await self._rejected(fence, exc)
        except errors.StoreError as exc:
            # A store error is never the workflow's failure: stop this attempt
            # and leave the run to be taken over (released now if the store
            # lets us, else when its lease expires), nothing lost. This worker
            # leaves it alone for a while, so a failing store is not hammered.
            log.error("run %s: store error, leaving the run to be taken over: %s",
                      row.run_id, exc)
            self._back_off(row.run_id)
            await self._release_quietly(fence)
        except asyncio.CancelledError:
            await self._release_quietly(fence)
            raise
        finally:
            self._leases.drop(fence)

    async def _rejected(self, fence: Fence, exc: errors.StoreRejected) -> None:
        """The database refused a write for good: taken over, the run would
        make the same write and be refused again, every lease, forever. It
        fails, with the database's reason (or, if even that is refused, it is
        left to be taken over as after any store error)."""
        log.error("run %s: the store refused a write for good, failing the run: %s",
                  fence.run_id, exc)
        try:
            await self.store.finish(fence, RunStatus.FAILED, error=_error_json(exc))
        except errors.StoreError as again:
            log.error("run %s: failing it was refused too, leaving it to be taken over: %s",
                      fence.run_id, again)
            self._back_off(fence.run_id)
            await self._release_quietly(fence)

    def _stop_for(self, why: str, exc: errors.SteadError) -> None:
        """Stop the worker (once) for a reason no retry mends, saying it in
        one line; `run()` raises `exc` once the worker has drained."""
        if self._stopped_by is None:
            log.error("worker %s stops: %s", self.id, why)
            self._stopped_by = exc
            self.stop()

    async def _stop(self, fence: Fence, stopped: takeover.Stopped) -> None:
        if stopped.status == RunStatus.PENDING:
            await self.store.release(fence)
        else:
            log.error("run %s stopped as %s: %s", fence.run_id, stopped.status, stopped.reason)
            await self.store.finish(
                fence, stopped.status,
                error=json.dumps({"type": stopped.error_type, "message": stopped.reason}),
                resume=stopped.resume,
            )

    async def _advance(self, row: RunRow, ready: takeover.Ready) -> None:
        x = ready.execution
        with tracing.attempt(run_id=row.run_id, epoch=row.epoch, worker_id=self.id,
                             task_id=row.task_id, workflow=row.workflow, version=row.version,
                             previous=x.journal.trace) as span:
            x.journal_trace(span.context())
            try:
                await self._attempt(row, ready)
            finally:
                span.replayed(x.journal.reused)

    async def _attempt(self, row: RunRow, ready: takeover.Ready) -> None:
        x = ready.execution
        run = Run(x, row)
        coro: Coroutine[Any, Any, Any] = ready.workflow.fn(run, *ready.args, **ready.kwargs)
        body = x.start(coro)
        try:
            result: Any = await body
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if x.suspended and (current is None or not current.cancelling()):
                return  # parked on a wait or timer: the store holds it, no worker does
            raise
        except Drain:
            await self._release_quietly(x.fence)
            return
        except Continued as went_on:
            log.info("run %s continued as run %s", row.run_id, went_on.run_id)
            return
        except Stop as stop:
            log.warning("run %s stopped as %s: %s", row.run_id, stop.status,
                        stop.error.get("message"))
            # A sibling branch's effect in flight has its outcome journaled first.
            await x.effects_settled()
            await x.finish(stop.status, error=json.dumps(stop.error))
            return
        except errors.StaleLease:
            raise
        except Exception as exc:
            if x.lost is not None:
                raise x.lost from exc
            if x.store_failed is not None:
                raise x.store_failed from exc
            if isinstance(exc, errors.CorruptRecord):
                await self._incompatible(x, exc)
                return
            if isinstance(exc, errors.StoreError):
                raise  # the store's failure, not the workflow's
            if x.incompatible is not None:
                await self._incompatible(x, x.incompatible)
                return
            log.info("run %s failed: %s: %s", row.run_id, type(exc).__qualname__, exc)
            await x.finish(RunStatus.FAILED, error=_error_json(exc))
            return
        if x.lost is not None:
            raise x.lost
        if x.store_failed is not None:
            raise x.store_failed  # the workflow went on past a failed write
        if x.incompatible is not None:
            await self._incompatible(x, x.incompatible)
            return
        left = x.journal.untaken()
        if left:
            first = left[0]
            await self._incompatible(x, errors.NonDeterminism(
                f"run {row.run_id}: the workflow returned, but the journal holds "
                f"{len(left)} record(s) the code no longer makes, first {first.kind} "
                f"{first.name!r} at seq {first.seq}. Register the old version alongside "
                "the new one, then `stead runs retry RUN`; or cancel the run."
            ))
            return
        try:
            text = codec.dumps(result, what=f"the result of workflow {row.workflow!r}",
                               secrets=x.secrets)
        except errors.SerializationError as exc:
            await x.finish(RunStatus.FAILED, error=_error_json(exc))
            return
        await x.finish(RunStatus.COMPLETED, result=text)

    async def _incompatible(
        self, x: Execution, exc: errors.NonDeterminism | errors.CorruptRecord,
    ) -> None:
        log.error("%s", exc)
        await x.finish(RunStatus.INCOMPATIBLE, error=json.dumps({
            "type": type(exc).__qualname__, "message": str(exc),
        }))

    async def _release_quietly(self, fence: Fence) -> None:
        with contextlib.suppress(errors.SteadError, asyncio.CancelledError):
            await asyncio.shield(self.store.release(fence))
