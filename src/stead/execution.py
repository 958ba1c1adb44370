"""One worker's attempt at one run: the fence it writes under, the journal it
replays, and the buffer of records that ride along with the next commit.

`run.now()`, `run.uuid()` and `run.random()` are buffered, not committed on
their own: nothing that depends on them can leave the process before the next
durable write, which carries them (DESIGN.md §3).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TypeVar

from stead import addresses, digests, errors
from stead.clock import Clock
from stead.records import (
    Fence,
    Record,
    RecordKind,
    RecordStatus,
    ResumeClass,
    ResumeRecord,
    RunStatus,
)
from stead.replay import Journal
from stead.store.base import Store

log = logging.getLogger("stead.run")
T = TypeVar("T")


class Drain(BaseException):
    """Raised at a call boundary when the worker is shutting down gracefully.
    A BaseException so a workflow's `except Exception` cannot swallow it."""


class Stop(BaseException):
    """Unwinds the workflow to stop the run for a human (`status`, with `error`
    saying what is known). A BaseException, so workflow code cannot swallow it."""

    def __init__(self, status: RunStatus, error: dict[str, object]) -> None:
        super().__init__(error.get("message", status))
        self.status = status
        self.error = error


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
        suspend_after: float = 1.0,
        recheck_every: float = 5.0,
    ) -> None:
        self.store = store
        self.fence = fence
        self.journal = journal
        self.clock = clock
        self.code_version = code_version
        self._next_seq = journal.length
        self._buffer: list[Record] = []
        self._lock = asyncio.Lock()
        self._resume_pending = takeover
        self.lost: errors.StaleLease | None = None
        self.incompatible: errors.NonDeterminism | None = None
        self.draining = False
        self.classes: dict[ResumeClass, int] = {}
        self.inflight = 0
        self.sending_sync = 0  # sync effect functions running in threads now
        self.suspended = False
        self.on_suspend: Callable[[], None] | None = None
        self.suspend_after = suspend_after
        self.recheck_every = recheck_every
        self._blocked: set[_Blocker] = set()
        # Signs wait tokens; the worker sets where it comes from (read lazily).
        self.secret_source: Callable[[], Awaitable[bytes]] | None = None
        self._settling: asyncio.Task[None] | None = None
        # Argument digests, incremental for a conversation that grows: per run.
        self.digests = digests.Digests()

    def classify(self, cls: ResumeClass) -> None:
        """Count a replayed record's class (DESIGN.md §4) for the resume record."""
        if self._resume_pending:
            self.classes[cls] = self.classes.get(cls, 0) + 1

    # -- guards -------------------------------------------------------------
    def check_live(self) -> None:
        """Before starting anything live: refuse if the run is no longer ours."""
        if self.lost is not None:
            raise self.lost
        if self.incompatible is not None:
            raise self.incompatible
        if self.draining:
            raise Drain()

    def take(self, addr: str, kind: RecordKind, name: str, digest: str) -> list[Record]:
        try:
            return self.journal.take(addr, kind, name, digest)
        except errors.NonDeterminism as exc:
            self.incompatible = exc
            raise

    # -- writes -------------------------------------------------------------
    def record(self, addr: str, attempt: int, kind: RecordKind, name: str, digest: str,
               status: RecordStatus, payload: str) -> Record:
        return Record(
            seq=-1, addr=addr, attempt=attempt, kind=kind, name=name, digest=digest,
            status=status, payload=payload, epoch=self.fence.epoch, at=self.clock.now(),
        )

    def buffer(self, rec: Record) -> None:
        self._buffer.append(rec)

    def _numbered(self, recs: Sequence[Record]) -> list[Record]:
        batch = [*self._buffer, *recs]
        return [r.numbered(self._next_seq + i) for i, r in enumerate(batch)]

    def _resume(self) -> ResumeRecord | None:
        if not self._resume_pending:
            return None
        return ResumeRecord(
            run_id=self.fence.run_id, epoch=self.fence.epoch, worker_id=self.fence.worker_id,
            at=self.clock.now(), from_seq=self.journal.length,
            code_version=self.code_version, reused=self.journal.reused,
            detail=json.dumps({"journal_records": self.journal.length,
                               "classes": self.classes}),
        )

    def _committed(self, batch: Sequence[Record], resume: ResumeRecord | None,
                   carried: int) -> None:
        self._next_seq += len(batch)
        # Drop only the buffered records this batch carried: a branch may have
        # buffered another while the write was in flight; it rides the next one.
        del self._buffer[:carried]
        if resume is not None:
            self._resume_pending = False
            log.info(
                "run %s resumed by %s at epoch %d from seq %d, %d record(s) reused",
                resume.run_id, resume.worker_id, resume.epoch, resume.from_seq, resume.reused,
            )

    async def write(
        self,
        recs: Sequence[Record],
        send: Callable[[list[Record], ResumeRecord | None], Awaitable[T]],
    ) -> T:
        """Number `recs` after the buffered records and hand both (and the
        pending resume record) to `send`, one fenced store transaction. If `send`
        raises, nothing was written and the buffer is kept."""
        async with self._lock:
            if self.lost is not None:
                raise self.lost
            batch = self._numbered(recs)
            resume = self._resume()
            self.inflight += 1
            try:
                result = await send(batch, resume)
            except errors.StaleLease as exc:
                self.lost = exc
                raise
            finally:
                self._idle()
            self._committed(batch, resume, carried=len(batch) - len(recs))
            return result

    async def commit(self, recs: Sequence[Record]) -> None:
        """Journal `recs` (with the buffered records) in one fenced transaction."""
        await self.write(recs, lambda batch, resume: self.store.append(self.fence, batch, resume))

    async def finish(self, status: RunStatus, *, result: str | None = None,
                     error: str | None = None) -> None:
        await self.write((), lambda batch, resume: self.store.finish(
            self.fence, status, result=result, error=error, records=batch, resume=resume,
        ))

    async def secret(self) -> bytes:
        if self.secret_source is None:
            raise errors.SteadError("no token secret: waits need a worker to run them")
        return await self.secret_source()

    # -- waiting ------------------------------------------------------------
    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Mark live work in flight (user code, a store round trip): the run
        must not suspend under it."""
        self.inflight += 1
        try:
            yield
        finally:
            self._idle()

    def _idle(self) -> None:
        self.inflight -= 1
        if self.inflight == 0 and self._blocked:
            self._schedule_settle()

    async def sleep_until(self, at: float) -> None:
        """Wait until the wall-clock time `at`; a long wait suspends the run."""
        delay = at - self.clock.now()
        if delay <= 0:
            return
        if delay <= self.suspend_after:
            await asyncio.sleep(delay)
            return
        while self.clock.now() < at:
            self.check_live()
            await self.block(wake_at=at, wait_id=None)

    async def block(self, *, wake_at: float | None, wait_id: str | None) -> None:
        """Park this branch until something may have changed: its wake time, a
        periodic re-check, a drain, or a failed attempt to suspend (an event
        arrived). The caller re-checks its condition and blocks again if need be.
        When every branch is parked and nothing is in flight, the run suspends:
        its lease is released and it holds no worker until it is woken."""
        loop = asyncio.get_running_loop()
        blocker = _Blocker(wake_at, wait_id, loop.create_future())
        self._blocked.add(blocker)
        until = self.clock.now() + self.recheck_every
        if wake_at is not None:
            until = min(until, wake_at)
        timer = loop.call_later(max(0.0, until - self.clock.now()), blocker.wake)
        self._schedule_settle()
        try:
            await blocker.future
        finally:
            timer.cancel()
            self._blocked.discard(blocker)

    def drain(self) -> None:
        """The worker is stopping: parked branches wake to meet `Drain`."""
        self.draining = True
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
        if self.inflight or not self._blocked or self.suspended or self.draining:
            return
        if self.lost is not None or self.incompatible is not None:
            return
        times = [b.wake_at for b in self._blocked if b.wake_at is not None]
        wake_at = min(times) if times else None
        if wake_at is not None and wake_at - self.clock.now() <= self.suspend_after:
            return  # a short wait: cheaper to sleep here than to park and replay
        wait_ids = [b.wait_id for b in self._blocked if b.wait_id is not None]
        try:
            await self.write((), lambda batch, resume: self.store.suspend(
                self.fence, batch, resume, wake_at, wait_ids,
            ))
        except errors.WaitNotOpen:
            for blocker in list(self._blocked):
                blocker.wake()  # an event arrived meanwhile: go and read it
            return
        except errors.SteadError as exc:
            log.warning("run %s could not suspend: %s", self.fence.run_id, exc)
            return
        self.suspended = True
        log.info("run %s suspended until %s", self.fence.run_id,
                 "an event" if wake_at is None else f"{wake_at:.3f} or an event")
        if self.on_suspend is not None:
            self.on_suspend()


class _Blocker:
    __slots__ = ("future", "wait_id", "wake_at")

    def __init__(self, wake_at: float | None, wait_id: str | None,
                 future: asyncio.Future[None]) -> None:
        self.wake_at = wake_at
        self.wait_id = wait_id
        self.future = future

    def wake(self) -> None:
        if not self.future.done():
            self.future.set_result(None)
