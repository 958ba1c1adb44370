"""The storage interface. It knows runs, journals and leases, nothing of
workflows. Every state change is one transaction; every write by a run's
holder is fenced by its epoch and raises `StaleLease` when the fence fails."""

from __future__ import annotations

import abc
import asyncio
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from stead import addresses
from stead.clock import Clock
from stead.records import (
    DeliveryContext,
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

# Judges a delivery inside its transaction (pure: no I/O).
Judge = Callable[[DeliveryContext], Judgement]
# Given the current task state (or None), returns the new data (JSON text, or
# None for a refused change) and the status and payload of the journal record
# that says what happened (the last of the records written with it).
StateChange = Callable[[StateRow | None], tuple[str | None, str, str]]


def _outside_branches(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        with addresses.outside_branches():
            return await method(*args, **kwargs)

    call.stead_outside_branches = True  # type: ignore[attr-defined]
    return call


class Store(abc.ABC):
    """A store's public coroutines run outside the workflow's branches: a task
    a store starts while a run awaits it (a pool waiting for a free connection,
    a group commit's flusher) must not be numbered as one of the run's
    branches, or the run's next gather would get other addresses on replay,
    where that store call is not made. Every subclass gets this by itself."""

    url: str
    clock: Clock

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in dir(cls):  # mixins' methods too (PostgreSQL's waits)
            member = inspect.getattr_static(cls, name)
            if (not name.startswith("_") and inspect.iscoroutinefunction(member)
                    and not getattr(member, "stead_outside_branches", False)):
                setattr(cls, name, _outside_branches(member))

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and migrate the schema."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    # -- runs ---------------------------------------------------------------
    @abc.abstractmethod
    async def create_run(self, new: NewRun) -> tuple[RunRow, bool]:
        """Insert `new`, unless a live run owns its task_id: then return that
        run and False."""

    @abc.abstractmethod
    async def get_run(self, run_id: str) -> RunRow:
        """Raise `UnknownRun` if there is none."""

    @abc.abstractmethod
    async def list_runs(
        self, *, status: str | None = None, workflow: str | None = None, limit: int = 100
    ) -> list[RunRow]: ...

    @abc.abstractmethod
    async def cancel_run(self, run_id: str) -> RunRow:
        """Cancel a live run and bump its epoch, so its holder's next write fails."""

    # -- leases -------------------------------------------------------------
    @abc.abstractmethod
    async def claim(
        self, worker_id: str, hosted: Sequence[str], lease_seconds: float, limit: int,
        exclude: Sequence[str] = (),
    ) -> list[RunRow]:
        """Take up to `limit` runnable runs whose `workflow@version` is in
        `hosted`, each with a fresh epoch and a lease until now + lease_seconds.
        `exclude` lists runs the caller still executes (a late heartbeat must
        not make a worker take over its own run)."""

    @abc.abstractmethod
    async def renew(self, fences: Sequence[Fence], lease_seconds: float) -> list[Fence]:
        """Extend the leases still held; return the fences that were lost."""

    @abc.abstractmethod
    async def release(self, fence: Fence) -> None:
        """Give the run back (it stays runnable); no-op if already lost."""

    # -- journal ------------------------------------------------------------
    @abc.abstractmethod
    async def load_journal(self, run_id: str) -> list[Record]:
        """The whole journal in one query, ordered by seq."""

    @abc.abstractmethod
    async def append(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None = None
    ) -> None:
        """Commit `records` (and the takeover's resume record) in one fenced
        transaction."""

    @abc.abstractmethod
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
        """End the run's attempt with `status` (terminal, or stopped for a human),
        releasing the lease, in one fenced transaction."""

    @abc.abstractmethod
    async def resume_stopped(
        self, run_id: str, expect_status: str, record: Record | None
    ) -> RunRow:
        """A human's decision on a run stopped as `expect_status`: journal `record`
        (if any; its seq and epoch are assigned here) and make the run claimable
        again, with a new epoch, in one transaction. Raises `NotStopped` if the run is
        not (or no longer) in that status, `UnknownRun` if there is none."""

    # -- waits and events -----------------------------------------------------
    @abc.abstractmethod
    async def open_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait: WaitRow,
    ) -> None:
        """Journal `records` and create `wait` (state open) in one fenced transaction."""

    @abc.abstractmethod
    async def get_wait(self, wait_id: str) -> WaitRow | None: ...

    @abc.abstractmethod
    async def list_waits(
        self, *, run_id: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[WaitRow]: ...

    @abc.abstractmethod
    async def close_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait_id: str, state: str,
    ) -> None:
        """Move an open wait to `state` (expired, revoked) and journal `records`, in
        one fenced transaction. Raises `WaitNotOpen` (writing nothing) if the wait
        was consumed or closed meanwhile."""

    @abc.abstractmethod
    async def suspend(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wake_at: float | None, wait_ids: Sequence[str],
    ) -> None:
        """Journal `records`, release the lease and park the run as waiting until
        an event or `wake_at`. Raises `WaitNotOpen` (writing nothing) if one of
        `wait_ids` is no longer open: an event arrived, do not sleep."""

    @abc.abstractmethod
    async def deliver(self, event: EventRow, judge: Judge) -> tuple[Judgement, EventRow]:
        """Judge and store `event` in one transaction: read the run, its waits,
        its task state versions and any event with the same id; call `judge`;
        store the event with the verdict; if accepted, consume the wait and wake
        the run. A duplicate stores nothing and returns the original event."""

    @abc.abstractmethod
    async def revoke_wait(self, wait_id: str) -> WaitRow:
        """Revoke an open wait and wake its run (it sees `WaitRevoked`)."""

    @abc.abstractmethod
    async def get_event(self, run_id: str, event_id: str) -> EventRow | None: ...

    @abc.abstractmethod
    async def list_events(self, run_id: str, limit: int = 1000) -> list[EventRow]: ...

    # -- task state ---------------------------------------------------------
    @abc.abstractmethod
    async def read_state(self, task_key: str) -> StateRow | None: ...

    @abc.abstractmethod
    async def update_state(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        task_key: str, change: StateChange,
    ) -> tuple[StateRow | None, Record]:
        """Compare-and-set in one fenced transaction: `change` sees the current
        state and returns the new data (None: refused) and the status and payload
        of the last of `records`, which is journaled with them. Returns the state
        now in force (None if there is none) and that last record as written."""

    @abc.abstractmethod
    async def secret(self) -> bytes:
        """This database's random secret (created on first use). Wait tokens are
        signed with STEAD_SECRET when it is set, else with this."""

    @abc.abstractmethod
    async def list_resumes(self, run_id: str) -> list[ResumeRecord]: ...

    async def wait_for_work(self, timeout: float) -> None:
        """Return when a run may have become claimable, or after `timeout`
        seconds. This default just sleeps (workers poll); a store that can be
        told about new work (PostgreSQL's LISTEN/NOTIFY) returns early."""
        await asyncio.sleep(timeout)

    @property
    def commits(self) -> int:
        """Transactions committed by this store object (for tests and benches)."""
        return 0
