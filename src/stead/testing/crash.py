"""Crash injection: a store wrapper that kills its own process at a chosen
journal write, so a test can prove that a workflow resumes instead of rerunning.

    store = CrashingStore(await stead.open_store(url), CrashPoint(after_commit=3))
    worker = stead.Worker(app, store, stead.WorkerOptions(lease_seconds=1.0))

Run that worker in a child process; it dies (SIGKILL: no `finally`, no atexit,
no lease release) right after the third journal write commits. Start a second
worker without a crash point and check that the run completes and that every
call the journal had acknowledged was not made again.

A *journal write* is one fenced transaction that journals a run's progress:
each `Store.append`, and the `Store.finish` that ends the run's attempt (it
carries the records still buffered, such as `run.now()`), and the fenced
writes of waits, timers and task state (`open_wait`, `close_wait`, `suspend`,
`update_state`), which journal records too. Writes are counted
per store object, over all the runs it serves. A human's decision journaled by
`Store.resume_stopped` is not a worker's write and is not counted.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import NoReturn

from stead.records import (
    EventRow,
    Fence,
    Judgement,
    NewRun,
    Record,
    ResumeRecord,
    RunRow,
    StateRow,
    WaitRow,
)
from stead.store.base import Judge, StateChange, Store


def kill_process() -> NoReturn:
    """SIGKILL the current process: the closest a test gets to pulling the plug.
    Nothing runs after it (no `finally`, no atexit, no lease release), but what
    the database already committed stays committed. POSIX only."""
    os.kill(os.getpid(), signal.SIGKILL)
    while True:  # pragma: no cover - the signal is delivered before this loop runs
        time.sleep(1)


@dataclasses.dataclass(frozen=True)
class CrashPoint:
    """Where to crash: just before the N-th journal write commits
    (`before_commit=N`), or just after it has committed (`after_commit=N`),
    counting from 1. Give exactly one of them.

    With `name`, only writes that journal a record of that call name (a step's,
    an `llm` call's or an effect's) are counted: `CrashPoint(after_commit=1,
    name="charge")` dies as soon as the first "charge" record is durable. For
    an effect the first write is its intent, so `after_commit=1` dies before
    the effect is called, and `before_commit=2` dies once it has been called,
    before anything more about it is journaled.
    """

    before_commit: int | None = None
    after_commit: int | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        given = [n for n in (self.before_commit, self.after_commit) if n is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of before_commit= and after_commit=")
        if given[0] < 1:
            raise ValueError("journal writes are counted from 1")

    def counts(self, records: Sequence[Record]) -> bool:
        """Whether a write journaling `records` is one this point counts."""
        return self.name is None or any(r.name == self.name for r in records)


class DelegatingStore(Store):
    """A `Store` that hands every call to another one. Subclass it to inject
    faults or to watch what a worker does, overriding only what you need.

    Each method is spelled out (so it type-checks): a method added to `Store`
    must be added here too, or instantiating this class fails loudly."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url
        self.clock = inner.clock

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def create_run(self, new: NewRun) -> tuple[RunRow, bool]:
        return await self.inner.create_run(new)

    async def get_run(self, run_id: str) -> RunRow:
        return await self.inner.get_run(run_id)

    async def list_runs(
        self, *, status: str | None = None, workflow: str | None = None, limit: int = 100
    ) -> list[RunRow]:
        return await self.inner.list_runs(status=status, workflow=workflow, limit=limit)

    async def cancel_run(self, run_id: str) -> RunRow:
        return await self.inner.cancel_run(run_id)

    async def claim(
        self, worker_id: str, hosted: Sequence[str], lease_seconds: float, limit: int,
        exclude: Sequence[str] = (),
    ) -> list[RunRow]:
        return await self.inner.claim(worker_id, hosted, lease_seconds, limit, exclude)

    async def renew(self, fences: Sequence[Fence], lease_seconds: float) -> list[Fence]:
        return await self.inner.renew(fences, lease_seconds)

    async def release(self, fence: Fence) -> None:
        await self.inner.release(fence)

    async def load_journal(self, run_id: str) -> list[Record]:
        return await self.inner.load_journal(run_id)

    async def append(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None = None
    ) -> None:
        await self.inner.append(fence, records, resume)

    async def finish(
        self,
        fence: Fence,
        status: str,
        *,
        result: str | None = None,
        error: str | None = None,
        records: Sequence[Record] = (),
        resume: ResumeRecord | None = None,
    ) -> None:
        await self.inner.finish(
            fence, status, result=result, error=error, records=records, resume=resume
        )

    async def resume_stopped(
        self, run_id: str, expect_status: str, record: Record | None
    ) -> RunRow:
        return await self.inner.resume_stopped(run_id, expect_status, record)

    async def list_resumes(self, run_id: str) -> list[ResumeRecord]:
        return await self.inner.list_resumes(run_id)

    async def wait_for_work(self, timeout: float) -> None:
        await self.inner.wait_for_work(timeout)

    async def open_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait: WaitRow,
    ) -> None:
        await self.inner.open_wait(fence, records, resume, wait)

    async def get_wait(self, wait_id: str) -> WaitRow | None:
        return await self.inner.get_wait(wait_id)

    async def list_waits(
        self, *, run_id: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[WaitRow]:
        return await self.inner.list_waits(run_id=run_id, state=state, limit=limit)

    async def close_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait_id: str, state: str,
    ) -> None:
        await self.inner.close_wait(fence, records, resume, wait_id, state)

    async def suspend(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wake_at: float | None, wait_ids: Sequence[str],
    ) -> None:
        await self.inner.suspend(fence, records, resume, wake_at, wait_ids)

    async def deliver(self, event: EventRow, judge: Judge) -> tuple[Judgement, EventRow]:
        return await self.inner.deliver(event, judge)

    async def revoke_wait(self, wait_id: str) -> WaitRow:
        return await self.inner.revoke_wait(wait_id)

    async def get_event(self, run_id: str, event_id: str) -> EventRow | None:
        return await self.inner.get_event(run_id, event_id)

    async def list_events(self, run_id: str, limit: int = 1000) -> list[EventRow]:
        return await self.inner.list_events(run_id, limit)

    async def read_state(self, task_key: str) -> StateRow | None:
        return await self.inner.read_state(task_key)

    async def update_state(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        task_key: str, change: StateChange,
    ) -> tuple[StateRow | None, Record]:
        return await self.inner.update_state(fence, records, resume, task_key, change)

    async def secret(self) -> bytes:
        return await self.inner.secret()

    @property
    def commits(self) -> int:
        return self.inner.commits


class CrashingStore(DelegatingStore):
    """Delegates to `inner` and calls `crash` (by default `kill_process`) at
    `point`. `writes` is the number of counted journal writes begun so far
(a write that then fails, e.g. with `StaleLease`, still counts).

    `crash` may be replaced, e.g. by a function raising an exception, to use
    the wrapper in-process; if it returns, the store carries on as if nothing
    happened (at `before_commit`, the write is then made).
    """

    def __init__(
        self, inner: Store, point: CrashPoint, *, crash: Callable[[], None] = kill_process
    ) -> None:
        super().__init__(inner)
        self.point = point
        self.crash = crash
        self.writes = 0

    async def append(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None = None
    ) -> None:
        number = self._before(records)
        await self.inner.append(fence, records, resume)
        self._after(number)

    async def finish(
        self,
        fence: Fence,
        status: str,
        *,
        result: str | None = None,
        error: str | None = None,
        records: Sequence[Record] = (),
        resume: ResumeRecord | None = None,
    ) -> None:
        number = self._before(records)
        await self.inner.finish(
            fence, status, result=result, error=error, records=records, resume=resume
        )
        self._after(number)

    async def open_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait: WaitRow,
    ) -> None:
        number = self._before(records)
        await self.inner.open_wait(fence, records, resume, wait)
        self._after(number)

    async def close_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait_id: str, state: str,
    ) -> None:
        number = self._before(records)
        await self.inner.close_wait(fence, records, resume, wait_id, state)
        self._after(number)

    async def suspend(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wake_at: float | None, wait_ids: Sequence[str],
    ) -> None:
        number = self._before(records)
        await self.inner.suspend(fence, records, resume, wake_at, wait_ids)
        self._after(number)

    async def update_state(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        task_key: str, change: StateChange,
    ) -> tuple[StateRow | None, Record]:
        number = self._before(records)
        result = await self.inner.update_state(fence, records, resume, task_key, change)
        self._after(number)
        return result

    def _before(self, records: Sequence[Record]) -> int | None:
        """Count the write; its number, or None if the point does not count it."""
        if not self.point.counts(records):
            return None
        self.writes += 1
        number = self.writes
        if self.point.before_commit == number:
            self.crash()
        return number

    def _after(self, number: int | None) -> None:
        # `number`, not `self.writes`: another run's write may have started meanwhile.
        if number is not None and self.point.after_commit == number:
            self.crash()
