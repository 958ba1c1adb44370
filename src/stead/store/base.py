"""The storage interface. It knows runs, journals and leases, nothing of
workflows. Every state change is one transaction; every write by a run's
holder is fenced by its epoch and raises `StaleLease` when the fence fails."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from stead.clock import Clock
from stead.records import Fence, NewRun, Record, ResumeRecord, RunRow


class Store(abc.ABC):
    url: str
    clock: Clock

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
    async def resume_stopped(self, run_id: str, expect_status: str, record: Record) -> RunRow:
        """A human's decision on a run stopped as `expect_status`: journal `record`
        (its seq and epoch are assigned here) and make the run claimable again,
        with a new epoch, in one transaction. Raises `NotStopped` if the run is
        not (or no longer) in that status, `UnknownRun` if there is none."""

    @abc.abstractmethod
    async def list_resumes(self, run_id: str) -> list[ResumeRecord]: ...

    @property
    def commits(self) -> int:
        """Transactions committed by this store object (for tests and benches)."""
        return 0
