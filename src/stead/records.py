"""The rows stead stores, as frozen records, and the run statuses.

A run's journal is an append-only list of `Record`s. `seq` is the position in
commit order (gapless, one writer at a time); `addr` is the call's deterministic
identity in the workflow code (see `addresses`), which is what replay matches.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Self

# Run statuses. A *live* run (any but the terminal ones) owns its task_id.
PENDING = "pending"
RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
INCOMPATIBLE = "incompatible_checkpoint"
OUTCOME_UNKNOWN = "outcome_unknown"
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED})
# Stopped for a human: live (the task stays owned) but no worker may claim it.
STOPPED = frozenset({INCOMPATIBLE, OUTCOME_UNKNOWN})
STATUSES = (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, INCOMPATIBLE, OUTCOME_UNKNOWN)

# Record kinds and outcomes.
STEP = "step"
LLM = "llm"
NOW = "now"
UUID = "uuid"
RANDOM = "random"
EFFECT = "effect"
KINDS = frozenset({STEP, LLM, NOW, UUID, RANDOM, EFFECT})
OK = "ok"
ERROR = "error"
# Effect phases besides ok/error (see effects.py).
INTENT = "intent"
ACCEPTED = "accepted"
UNKNOWN_OUTCOME = "unknown"
RECONCILED = "reconciled"
RECORD_STATUSES = frozenset({OK, ERROR, INTENT, ACCEPTED, UNKNOWN_OUTCOME, RECONCILED})


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One acknowledged call (or one attempt of it). `payload` is JSON text:
    the result when `status` is ok, `{"type", "message", "retry_at"}` when error."""

    seq: int
    addr: str
    attempt: int
    kind: str
    name: str
    digest: str
    status: str
    payload: str
    epoch: int
    at: float

    def evolve(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True, slots=True)
class RunRow:
    run_id: str
    workflow: str
    version: int
    task_id: str | None
    status: str
    input: str
    result: str | None
    error: str | None
    epoch: int
    lease_owner: str | None
    lease_expires_at: float | None
    created_at: float
    updated_at: float

    @property
    def live(self) -> bool:
        return self.status not in TERMINAL

    def evolve(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True, slots=True)
class NewRun:
    run_id: str
    workflow: str
    version: int
    task_id: str | None
    input: str


@dataclasses.dataclass(frozen=True, slots=True)
class Fence:
    """What a write must prove: this worker still holds this run at this epoch."""

    run_id: str
    epoch: int
    worker_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class ResumeRecord:
    """The audit of one takeover, written with the first write after replay."""

    run_id: str
    epoch: int
    worker_id: str
    at: float
    from_seq: int
    code_version: str
    reused: int
    detail: str = "{}"
