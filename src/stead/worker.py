"""`Worker`: claims runnable runs, executes them on one event loop, keeps
their leases alive by heartbeat and gives them back when it stops.

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
import traceback
import uuid
from collections.abc import Coroutine
from typing import Any

from stead import addresses, codec, errors, takeover
from stead.app import App
from stead.clock import Clock, SystemClock
from stead.execution import Drain, Execution, ExecutionOptions, Stop
from stead.records import Fence, RunRow, RunStatus
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
    # The largest result (of a step, effect or model call) journaled, as JSON:
    # a larger one raises `ResultTooLarge` in the workflow, naming the call.
    max_result_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.lease_seconds <= 0 or self.poll_interval <= 0:
            raise ValueError("lease_seconds and poll_interval must be positive")


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
        self._secret: bytes | None = None
        self._execution_options = ExecutionOptions(
            suspend_after=self.options.suspend_after, token_secret=self._token_secret,
            max_result_bytes=self.options.max_result_bytes,
        )

    # -- public -------------------------------------------------------------
    async def run(self) -> None:
        """Work until `stop()` (or SIGTERM, when started by `stead worker`)."""
        await self._loop(until_idle=False)

    async def run_until_idle(self) -> None:
        """Work until no run is executing and none can be claimed right now."""
        await self._loop(until_idle=True)

    def stop(self) -> None:
        """Stop claiming; running runs are released at their next call boundary."""
        self._stopping.set()
        self._wake.set()
        for _task, execution in self._active.values():
            if execution is not None:
                execution.drain()

    # -- loop ---------------------------------------------------------------
    async def _loop(self, *, until_idle: bool) -> None:
        addresses.install(asyncio.get_running_loop())
        heartbeat = asyncio.create_task(self._heartbeat())
        try:
            while not self._stopping.is_set():
                free = self.options.concurrency - len(self._active)
                claimed: list[RunRow] = []
                if free > 0:
                    try:
                        claimed = await self.store.claim(
                            self.id, self.app.hosted(), self.options.lease_seconds, free,
                            exclude=list(self._active),
                        )
                    except errors.StoreUnavailable as exc:
                        # Locked or briefly unreachable: nothing was claimed; poll again.
                        log.warning("worker %s could not claim: %s", self.id, exc)
                for row in claimed:
                    self._spawn(row)
                if claimed and len(claimed) == free:
                    continue
                if until_idle and not claimed and not self._active:
                    return
                if claimed:
                    continue
                await self._idle(until_idle)
        finally:
            await self._drain()
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)

    async def _idle(self, until_idle: bool) -> None:
        """Wait for a run to finish, a stop, news of work from the store, or the
        next poll."""
        self._wake.clear()
        if self._stopping.is_set():  # stop() came while we claimed: its wake was cleared
            return
        timeout = None if until_idle and self._active else self.options.poll_interval
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
        task = asyncio.create_task(self._execute(row), context=contextvars.copy_context())
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

    async def _heartbeat(self) -> None:
        interval = self.options.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            fences = {
                ex.fence: task for task, ex in self._active.values() if ex is not None
            }
            if not fences:
                continue
            try:
                lost = await self.store.renew(list(fences), self.options.lease_seconds)
            except errors.StoreError as exc:
                log.warning("worker %s could not renew leases: %s", self.id, exc)
                continue
            for fence in lost:
                log.warning("worker %s lost run %s (epoch %d)", self.id, fence.run_id, fence.epoch)
                entry = self._active.get(fence.run_id)
                if entry is not None and entry[1] is not None:
                    entry[1].lose(errors.StaleLease(f"lease on run {fence.run_id} was lost"))
                fences[fence].cancel()

    async def _token_secret(self) -> bytes:
        if self._secret is None:
            env = os.environ.get("STEAD_SECRET")
            self._secret = env.encode() if env else await self.store.secret()
        return self._secret

    # -- one run --------------------------------------------------------------
    async def _execute(self, row: RunRow) -> None:
        fence = Fence(row.run_id, row.epoch, self.id)
        try:
            ready = await takeover.prepare(self.app, self.store, self.clock, row, self.id,
                                           self._execution_options)
            if isinstance(ready, takeover.Stopped):
                await self._stop(fence, ready)
                return
            task = self._active.get(row.run_id)
            if task is not None:
                self._active[row.run_id] = (task[0], ready.execution)
            await self._advance(row, ready)
        except errors.StaleLease as exc:
            log.warning("run %s: %s", row.run_id, exc)
        except errors.StoreError as exc:
            # The store is unreachable: leave the run; its lease expires and
            # it is taken over with nothing lost.
            log.error("run %s: store error, leaving the run to be taken over: %s",
                      row.run_id, exc)
        except asyncio.CancelledError:
            await self._release_quietly(fence)
            raise

    async def _stop(self, fence: Fence, stopped: takeover.Stopped) -> None:
        if stopped.status == RunStatus.PENDING:
            await self.store.release(fence)
        else:
            log.error("run %s stopped as %s: %s", fence.run_id, stopped.status, stopped.reason)
            await self.store.finish(
                fence, stopped.status,
                error=json.dumps({"type": "CorruptRecord", "message": stopped.reason}),
            )

    async def _advance(self, row: RunRow, ready: takeover.Ready) -> None:
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
        except Stop as stop:
            log.warning("run %s stopped as %s: %s", row.run_id, stop.status,
                        stop.error.get("message"))
            await x.finish(stop.status, error=json.dumps(stop.error))
            return
        except errors.StaleLease:
            raise
        except Exception as exc:
            if x.lost is not None:
                raise x.lost from exc
            if x.incompatible is not None:
                await self._incompatible(x, x.incompatible)
                return
            log.info("run %s failed: %s: %s", row.run_id, type(exc).__qualname__, exc)
            await x.finish(RunStatus.FAILED, error=_error_json(exc))
            return
        if x.lost is not None:
            raise x.lost
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
            text = codec.dumps(result, what=f"the result of workflow {row.workflow!r}")
        except errors.SerializationError as exc:
            await x.finish(RunStatus.FAILED, error=_error_json(exc))
            return
        await x.finish(RunStatus.COMPLETED, result=text)

    async def _incompatible(self, x: Execution, exc: errors.NonDeterminism) -> None:
        log.error("%s", exc)
        await x.finish(RunStatus.INCOMPATIBLE, error=json.dumps({
            "type": "NonDeterminism", "message": str(exc),
        }))

    async def _release_quietly(self, fence: Fence) -> None:
        with contextlib.suppress(errors.SteadError, asyncio.CancelledError):
            await asyncio.shield(self.store.release(fence))
