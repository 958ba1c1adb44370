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
WAITING = "waiting"  # suspended on a wait or timer: no lease, no worker
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
INCOMPATIBLE = "incompatible_checkpoint"
OUTCOME_UNKNOWN = "outcome_unknown"
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED})
# Stopped for a human: live (the task stays owned) but no worker may claim it.
STOPPED = frozenset({INCOMPATIBLE, OUTCOME_UNKNOWN})
STATUSES = (
    PENDING, RUNNING, WAITING, COMPLETED, FAILED, CANCELLED, INCOMPATIBLE, OUTCOME_UNKNOWN,
)

# Record kinds and outcomes.
STEP = "step"
LLM = "llm"
NOW = "now"
UUID = "uuid"
RANDOM = "random"
EFFECT = "effect"
WAIT = "wait"
SLEEP = "sleep"
STATE = "state"
KINDS = frozenset({STEP, LLM, NOW, UUID, RANDOM, EFFECT, WAIT, SLEEP, STATE})
OK = "ok"
ERROR = "error"
# Effect phases besides ok/error (see effects.py).
INTENT = "intent"
ACCEPTED = "accepted"
UNKNOWN_OUTCOME = "unknown"
RECONCILED = "reconciled"
# Wait phases: opened, then resolved by an event (ok), expiry or revocation.
OPEN = "open"
EXPIRED = "expired"
REVOKED = "revoked"
RECORD_STATUSES = frozenset({
    OK, ERROR, INTENT, ACCEPTED, UNKNOWN_OUTCOME, RECONCILED, OPEN, EXPIRED, REVOKED,
})
# Wait row states.
CONSUMED = "consumed"


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

    def numbered(self, seq: int) -> Record:
        """This record at `seq` (what every write does to every record: spelled
        out, because `dataclasses.replace` costs ~10 µs a call)."""
        return Record(seq, self.addr, self.attempt, self.kind, self.name, self.digest,
                      self.status, self.payload, self.epoch, self.at)


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
    wake_at: float | None = None

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


@dataclasses.dataclass(frozen=True, slots=True)
class WaitRow:
    """A durable wait. `bind` and `schema` are JSON text; only the token's
    hash is kept (None when the wait takes no token)."""

    wait_id: str
    run_id: str
    addr: str
    kind: str
    bind: str
    schema: str | None
    token_hash: str | None
    task_key: str
    expires_at: float | None
    state: str
    event_id: str | None
    created_at: float
    closed_at: float | None = None

    def evolve(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True, slots=True)
class EventRow:
    """A delivered event as stored, with its verdict (accepted/rejected)."""

    run_id: str
    event_id: str
    wait_id: str | None
    kind: str | None
    payload: str
    bind: str
    verdict: str
    reason: str | None
    detail: str | None
    received_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class DeliveryContext:
    """What a delivery is judged on, read inside its transaction."""

    run: RunRow | None
    waits: tuple[WaitRow, ...]
    state_versions: dict[str, int]
    existing: EventRow | None
    now: float


@dataclasses.dataclass(frozen=True, slots=True)
class Judgement:
    """The verdict on one event: `accepted` (consuming `wait_id`), `rejected`
    (with `reason`) or `duplicate` (an event with that id is already stored)."""

    verdict: str
    wait_id: str | None = None
    reason: str | None = None
    detail: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class StateRow:
    task_key: str
    version: int
    data: str
    run_id: str | None
    updated_at: float | None
