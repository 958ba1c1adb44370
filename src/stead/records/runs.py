"""A run as stored: its row and statuses, the run to start, its intent's
versions, its task's state, the operator actions audited on it, and its
lineage (the forks and the successor that came from it)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Self


class RunStatus(enum.StrEnum):
    """Where a run is. A *live* run (any but the terminal ones) owns its task_id."""

    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"  # suspended on a wait or timer: no lease, no worker
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INCOMPATIBLE = "incompatible_checkpoint"
    OUTCOME_UNKNOWN = "outcome_unknown"
    # Paused on a decision about its intent (a policy's Pause, an expired
    # grant, an exhausted budget): a person resumes or terminates it.
    PAUSED = "paused"
    # Terminated by its policy or a person on revalidation: never retried.
    REVALIDATION_FAILED = "revalidation_failed"


TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED,
                      RunStatus.REVALIDATION_FAILED})
# Stopped for a human: live (the task stays owned) but no worker may claim it.
STOPPED = frozenset({RunStatus.INCOMPATIBLE, RunStatus.OUTCOME_UNKNOWN, RunStatus.PAUSED})


@dataclasses.dataclass(frozen=True, slots=True)
class RunRow:
    """A run's row as stored: its identity and status, its input, result and
    error (JSON text), its epoch, and who holds its lease until when."""

    run_id: str
    workflow: str
    version: int
    task_id: str | None
    status: RunStatus
    input: str
    result: str | None
    error: str | None
    epoch: int
    lease_owner: str | None
    lease_expires_at: float | None
    created_at: float
    updated_at: float
    wake_at: float | None = None
    intent_version: int = 0  # the intent version in force; 0: the run has none
    parent_id: str | None = None  # the run that started this one with `run.child`
    deadline: float | None = None  # when the run fails if it has not ended
    cancel_requested: float | None = None  # when a cancel was asked of its holder
    queue: str | None = None  # claimed only under this queue's limits
    priority: int = 0  # in its queue: lower is claimed first
    dedup_key: str | None = None  # unique among its queue's live runs
    # Its first claim (a queue's rate counts these; before it the run was queued).
    started_at: float | None = None
    # JSON: the started markers of the calls its holder had in flight, not yet
    # journaled, at its last lease renewal (see `stead.replay.markers_from`).
    in_flight: str | None = None
    # Read by a claim, not stored with the run (table lease_ends): when the
    # lease of the run's previous holder, taken for dead by its presence alone
    # (see `Store.end_dead_leases`), would have run out; that holder may still
    # be alive, cut off from the database, and sending.
    prior_lease_until: float | None = None
    # Read beside the row where a run is shown (table run_tenants): the tenant
    # it serves, None for none. Rows a claim or a write returns leave it None.
    tenant: str | None = None

    @property
    def live(self) -> bool:
        return self.status not in TERMINAL

    @property
    def task_key(self) -> str:
        """The key of its task's state and waits: its task id, else the run."""
        return self.task_id if self.task_id is not None else f"run:{self.run_id}"

    def evolve(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True, slots=True)
class NewRun:
    """A run to start: what `Store.create_run` inserts (input as JSON text)."""

    run_id: str
    workflow: str
    version: int
    task_id: str | None
    input: str
    # The run's intent (JSON text), stored as its version 1 with the run.
    intent: str | None = None
    intent_why: str = "given at start"
    intent_by: str = "client"  # who gave it (`Client.start`: the OS user)
    parent_id: str | None = None
    deadline: float | None = None
    # The queue it is claimed under, its priority there (lower first) and a
    # key that returns the queue's live run holding it instead of a new run.
    queue: str | None = None
    priority: int = 0
    dedup_key: str | None = None
    # The tenant it serves (`stead.tenants`), None for none. A run with a
    # parent_id and no tenant of its own takes its parent's.
    tenant: str | None = None


def task_taken(new: NewRun, owner: RunRow) -> str:
    """Why `new` cannot start: a live run of another workflow owns its task."""
    return (f"task {new.task_id!r} already has a live run {owner.run_id} of workflow "
            f"{owner.workflow!r}; cancel it before starting {new.workflow!r} for that task")


@dataclasses.dataclass(frozen=True, slots=True)
class IntentRow:
    """One version of a run's intent: `intent` is its JSON text (see
    `stead.intent`), `author` and `why` say who changed it and why."""

    run_id: str
    version: int
    intent: str
    author: str
    why: str
    at: float


@dataclasses.dataclass(frozen=True, slots=True)
class StateRow:
    """One version of a task's facts (`data`, JSON text) as stored."""

    task_key: str
    version: int
    data: str
    run_id: str | None
    updated_at: float | None
    # Who changed it from outside any run, and why (`Client.set_state`);
    # None for a run's own change (`run_id` says which run).
    author: str | None = None
    why: str | None = None


class ActionOutcome(enum.StrEnum):
    """What became of an operator's action."""

    DONE = "done"
    REFUSED = "refused"  # the run moved on, or the store refused it: `detail` says why


@dataclasses.dataclass(frozen=True, slots=True)
class ActionRow:
    """One operator action on a run, as audited: which `action` on which
    `target` (a wait, an effect, a tool; empty for the run itself), who
    (`author`) and why, and its outcome with the message it gave."""

    action_id: str
    run_id: str
    action: str
    target: str
    author: str
    why: str
    outcome: ActionOutcome
    detail: str
    at: float


class LineageKind(enum.StrEnum):
    """How a run came from another (see `Link`)."""

    FORK = "fork"  # `Client.fork`: a copy of the parent's journal prefix
    CONTINUED = "continued"  # `run.continue_as_new`: the parent's successor


@dataclasses.dataclass(frozen=True, slots=True)
class Link:
    """Run `run_id` came from run `parent_id`: a fork of its journal's first
    `at_seq` records, or its successor (`continued`, `at_seq` the parent's
    journal length when it ended)."""

    run_id: str
    parent_id: str
    kind: LineageKind
    at_seq: int
    created_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class Lineage:
    """Where a run came from (`parent`: None for a run started by a client)
    and the runs that came from it (`children`: its forks and its successor,
    oldest first)."""

    parent: Link | None
    children: tuple[Link, ...]

    @property
    def successor(self) -> str | None:
        """The run that continued this one (`run.continue_as_new`), if any."""
        return next((c.run_id for c in self.children if c.kind == LineageKind.CONTINUED), None)
