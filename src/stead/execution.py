"""One worker's attempt at one run: the fence it writes under, the journal it
replays, and the buffer of records that ride along with the next commit.

`run.now()`, `run.uuid()` and `run.random()` are buffered, not committed on
their own: nothing that depends on them can leave the process before the next
durable write, which carries them (DESIGN.md §3).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence

from stead import errors
from stead.clock import Clock
from stead.records import Fence, Record, ResumeRecord
from stead.replay import Journal
from stead.store.base import Store

log = logging.getLogger("stead.run")


class Drain(BaseException):
    """Raised at a call boundary when the worker is shutting down gracefully.
    A BaseException so a workflow's `except Exception` cannot swallow it."""


class Stop(BaseException):
    """Unwinds the workflow to stop the run for a human (`status`, with `error`
    saying what is known). A BaseException, so workflow code cannot swallow it."""

    def __init__(self, status: str, error: dict[str, object]) -> None:
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
        self.classes: dict[str, int] = {}

    def classify(self, cls: str) -> None:
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

    def take(self, addr: str, kind: str, name: str, digest: str) -> list[Record]:
        try:
            return self.journal.take(addr, kind, name, digest)
        except errors.NonDeterminism as exc:
            self.incompatible = exc
            raise

    # -- writes -------------------------------------------------------------
    def record(self, addr: str, attempt: int, kind: str, name: str, digest: str,
               status: str, payload: str) -> Record:
        return Record(
            seq=-1, addr=addr, attempt=attempt, kind=kind, name=name, digest=digest,
            status=status, payload=payload, epoch=self.fence.epoch, at=self.clock.now(),
        )

    def buffer(self, rec: Record) -> None:
        self._buffer.append(rec)

    def _numbered(self, recs: Sequence[Record]) -> list[Record]:
        batch = [*self._buffer, *recs]
        return [r.evolve(seq=self._next_seq + i) for i, r in enumerate(batch)]

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

    async def commit(self, recs: Sequence[Record]) -> None:
        """Journal `recs` (with the buffered records) in one fenced transaction."""
        async with self._lock:
            if self.lost is not None:
                raise self.lost
            batch = self._numbered(recs)
            resume = self._resume()
            try:
                await self.store.append(self.fence, batch, resume)
            except errors.StaleLease as exc:
                self.lost = exc
                raise
            self._committed(batch, resume, carried=len(batch) - len(recs))

    async def finish(self, status: str, *, result: str | None = None,
                     error: str | None = None) -> None:
        async with self._lock:
            batch = self._numbered(())
            resume = self._resume()
            try:
                await self.store.finish(
                    self.fence, status, result=result, error=error, records=batch,
                    resume=resume,
                )
            except errors.StaleLease as exc:
                self.lost = exc
                raise
            self._committed(batch, resume, carried=len(batch))

    async def sleep_until(self, at: float) -> None:
        delay = at - self.clock.now()
        if delay > 0:
            await asyncio.sleep(delay)
