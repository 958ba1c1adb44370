"""`RunInfo`: what a client sees of a run, read from its stored row."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from stead import records
from stead.records import RunRow, RunStatus


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """What a client sees of a run."""

    run_id: str
    workflow: str
    version: int
    task_id: str | None
    status: RunStatus
    epoch: int
    created_at: float
    updated_at: float
    lease_owner: str | None
    result: Any = None
    error: dict[str, Any] | None = None
    created: bool = False
    lease_expires_at: float | None = None
    # Listed as stranded (`list_runs(stranded=True)`): no live worker serves
    # its version; `hosted_at` is when one last did (None: none ever did).
    stranded: bool = False
    hosted_at: float | None = None
    parent_id: str | None = None  # the run that started this one (`run.child`)
    deadline: float | None = None
    cancel_requested: bool = False  # asked to stop at its next call boundary
    queue: str | None = None
    priority: int = 0
    # The arguments it was started with, as stored: {"args": [...], "kwargs": {...}}.
    input: Any = None
    # When a worker first claimed it (None: not yet): before, it was queued.
    started_at: float | None = None
    tenant: str | None = None  # the customer it serves (`stead.tenants`), None for none

    @property
    def code(self) -> str:
        return f"{self.workflow}@{self.version}"

    @property
    def done(self) -> bool:
        return self.status in records.TERMINAL

    @property
    def outcome_unknown(self) -> records.UnknownOutcome | None:
        """For a run stopped as `outcome_unknown`: the effect it stopped on and
        what is known of it (decide it with `reconcile`); otherwise None."""
        if self.status != RunStatus.OUTCOME_UNKNOWN or not isinstance(self.error, dict):
            return None
        return records.UnknownOutcome.from_error(self.error)

    @classmethod
    def from_row(cls, row: RunRow, *, created: bool = False) -> RunInfo:
        return cls(
            run_id=row.run_id, workflow=row.workflow, version=row.version,
            task_id=row.task_id, status=row.status, epoch=row.epoch,
            created_at=row.created_at, updated_at=row.updated_at,
            lease_owner=row.lease_owner,
            result=None if row.result is None else loads(row.result, row.run_id),
            error=None if row.error is None else loads(row.error, row.run_id),
            created=created, lease_expires_at=row.lease_expires_at,
            parent_id=row.parent_id, deadline=row.deadline,
            cancel_requested=row.cancel_requested is not None, queue=row.queue,
            priority=row.priority, input=loads(row.input, row.run_id),
            started_at=row.started_at, tenant=row.tenant,
        )



def loads(text: str, run_id: str) -> Any:
    """A stored JSON value; one that is not JSON reads as a `CorruptRecord` error."""
    try:
        return json.loads(text)
    except ValueError:
        return {"type": "CorruptRecord", "message": f"run {run_id}: stored value is not JSON"}
