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

Every one of those writes reaches the store's database as a fenced journal
write, so the crash is injected there, under the store's logic: a crashing
store is the same store on a database that dies on cue.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

from stead.records import Record, RunRow
from stead.store import seam
from stead.store.base import Store, run_outside_branches


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
    faults or to watch what a worker does, overriding only what you need
    (call `self.inner.<method>` or `super().<method>` for the real thing).

    It runs on the inner store's database, so `commits` and the data are
    the inner store's; every public coroutine of `Store` is delegated, so a
    method `Store` gains later is delegated too (`claim_unshared`, what a
    worker's plain claim is, goes through the subclass's own `claim` and
    `ready_tenants` when it overrides either)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner.database)
        self.inner = inner

    async def claim_unshared(
        self, worker_id: str, hosted: Sequence[str], lease_seconds: float, limit: int,
        exclude: Sequence[str] = (),
    ) -> seam.UnsharedClaim:
        """Delegated, unless a subclass overrides `claim` or `ready_tenants`:
        then made of those two calls, so that a subclass watching (or
        faulting) the plain claim sees each plain claim a worker makes."""
        cls = type(self)
        if cls.claim is DelegatingStore.claim \
                and cls.ready_tenants is DelegatingStore.ready_tenants:
            return await self.inner.claim_unshared(worker_id, hosted, lease_seconds, limit,
                                                   exclude)
        tenants = (await self.ready_tenants())[:seam.UNSHARED_TENANTS]
        runs = await self.claim(worker_id, hosted, lease_seconds, limit, exclude) \
            if len(tenants) <= 1 else []
        return seam.UnsharedClaim(tenants, runs)


def _delegate(name: str) -> Callable[..., Any]:
    async def call(self: DelegatingStore, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.inner, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = getattr(Store, name).__doc__
    return call


for _name, _member in inspect.getmembers(Store, inspect.iscoroutinefunction):
    if not _name.startswith("_") and _name not in DelegatingStore.__dict__:
        setattr(DelegatingStore, _name, _delegate(_name))
run_outside_branches(DelegatingStore)  # as Store's own methods do


T = TypeVar("T")


class CrashingDatabase(seam.Database):
    """`inner`, except that it calls `crash` at `point` (see `CrashingStore`)."""

    def __init__(self, inner: seam.Database, point: CrashPoint, crash: Callable[[], None]) -> None:
        self.inner = inner
        self.point = point
        self.crash = crash
        self.writes = 0
        self.written: list[seam.FencedWrite] = []
        self.url, self.clock, self.display = inner.url, inner.clock, inner.display
        self.lease_clock, self.local = inner.lease_clock, inner.local

    @property
    def commits(self) -> int:
        return self.inner.commits

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def read(self, flow: seam.FlowFactory[T]) -> T:
        return await self.inner.read(flow)

    async def write(self, flow: seam.FlowFactory[T], how: seam.Writing[T]) -> T:
        counted: list[int | None] = []  # a write tried again is counted once

        def watched() -> seam.Flow[T]:
            steps = flow()
            answer = None
            while True:
                try:
                    step = steps.send(answer)
                except StopIteration as done:
                    result: T = done.value
                    return result
                if isinstance(step, seam.Journal) and not counted:
                    counted.append(self._before(step.write))
                answer = yield step

        result = await self.inner.write(watched, how)
        if counted:
            self._after(counted[0])
        return result

    async def journal(self, write: seam.FencedWrite, landed: seam.Landed[None]) -> None:
        number = self._before(write)
        await self.inner.journal(write, landed)
        self._after(number)

    async def claim(self, claim: seam.Claim) -> list[RunRow]:
        return await self.inner.claim(claim)

    async def claim_unshared(self, claim: seam.Claim) -> seam.UnsharedClaim:
        return await self.inner.claim_unshared(claim)

    def work_mark(self) -> seam.WorkMark | None:
        return self.inner.work_mark()

    async def wait_for_work(self, timeout: float, *,
                            ring: Callable[[], None] | None = None,
                            since: seam.WorkMark | None = None) -> None:
        await self.inner.wait_for_work(timeout, ring=ring, since=since)

    def holding(self, run_ids: Sequence[str]) -> None:
        self.inner.holding(run_ids)

    def _before(self, write: seam.FencedWrite) -> int | None:
        """Count the write; its number, or None if the point does not count it."""
        if not self.point.counts(write.records):
            return None
        self.writes += 1
        self.written.append(write)
        number = self.writes
        if self.point.before_commit == number:
            self.crash()
        return number

    def _after(self, number: int | None) -> None:
        # `number`, not `self.writes`: another run's write may have started meanwhile.
        if number is not None and self.point.after_commit == number:
            self.crash()


class CrashingStore(Store):
    """`inner`'s store logic on `inner`'s database, calling `crash` (by
    default `kill_process`) at `point`. `writes` is the number of counted
    journal writes begun so far (a write that then fails, e.g. with
    `StaleLease`, still counts), and `written` those writes, in order (the
    crash matrix reads them to find every boundary of a run).

    `crash` may be replaced, e.g. by a function raising an exception, to use
    the wrapper in-process; if it returns, the store carries on as if nothing
    happened (at `before_commit`, the write is then made).

    Wrap other `DelegatingStore`s around it (`ClaimLog(CrashingStore(store,
    point))`), not inside it: it runs the store's own logic, so it would not
    see their overrides.
    """

    def __init__(
        self, inner: Store, point: CrashPoint, *, crash: Callable[[], None] = kill_process
    ) -> None:
        if isinstance(inner, DelegatingStore):
            raise TypeError(
                f"CrashingStore runs under the store logic, so it would bypass what "
                f"{type(inner).__name__} overrides: wrap it the other way round, "
                f"{type(inner).__name__}(CrashingStore(store, point))"
            )
        self._crashing = CrashingDatabase(inner.database, point, crash)
        super().__init__(self._crashing)
        self.inner = inner
        self.point = point
        self.key_source, self.key_file = inner.key_source, inner.key_file  # the same keys

    @property
    def writes(self) -> int:
        return self._crashing.writes

    @property
    def written(self) -> list[seam.FencedWrite]:
        return list(self._crashing.written)

    @property
    def crash(self) -> Callable[[], None]:
        return self._crashing.crash
