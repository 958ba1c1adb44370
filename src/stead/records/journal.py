"""A run's journal: its records, the kinds of call they are of and the phases
they reach, the fence every write proves, the points around a write where
the crash matrix kills a worker, and the workspace snapshots records save."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Self


class RecordKind(enum.StrEnum):
    """What call a journal record is of."""

    STEP = "step"
    LLM = "llm"
    NOW = "now"
    UUID = "uuid"
    RANDOM = "random"
    EFFECT = "effect"
    WAIT = "wait"
    SLEEP = "sleep"
    STATE = "state"
    INTENT = "intent"  # `run.intent(...)`: a new intent version declared by the workflow
    # The journal from `from_seq` on is no longer replayed (kept, never
    # deleted): a `fresh` call is asked again after a revalidation.
    CUT = "cut"
    # The span context of an execution attempt, journaled with its first
    # write when tracing is on (see `stead.tracing`); never replayed.
    TRACE = "trace"
    # A directory attached to the run (`run.workspace`) and its snapshots (`ws.save()`).
    WORKSPACE = "workspace"
    # The environment a `fresh=stead.Fingerprint(...)` step's result was made in.
    FINGERPRINT = "fingerprint"
    # `run.child(...)`: the child's id when it started (open), then its
    # outcome once it ended (ok, or error with its status and error).
    CHILD = "child"
    # A policy's decision before a live effect or model call, with the action
    # it judged (see `stead.policy`): the audit of it; never replayed.
    DECISION = "decision"


KINDS = frozenset(RecordKind)


class RecordStatus(enum.StrEnum):
    """The phase a journal record says its call reached."""

    OK = "ok"
    ERROR = "error"
    # A step or model call began this attempt. Rides along with the next
    # commit made while the call is in flight (never a commit of its own), so
    # an attempt whose worker died mid-call is counted on takeover.
    STARTED = "started"
    # An effect's phases besides ok/error (see `stead.workflow.effects`).
    INTENT = "intent"
    ACCEPTED = "accepted"
    UNKNOWN = "unknown"
    RECONCILED = "reconciled"
    # A wait's: opened, then resolved by an event (ok), expiry or revocation.
    OPEN = "open"
    EXPIRED = "expired"
    REVOKED = "revoked"


RECORD_STATUSES = frozenset(RecordStatus)


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One acknowledged call (or one attempt of it). `payload` is JSON text:
    the result when `status` is ok, `{"type", "message", "retry_at"}` when error."""

    seq: int
    addr: str
    attempt: int
    kind: RecordKind
    name: str
    digest: str
    status: RecordStatus
    payload: str
    epoch: int
    at: float
    # A step's arguments by parameter name, as a person reads them (JSON text,
    # `{"args", "kwargs", "names"}`, values clipped, secrets masked: see
    # `stead.run.steps`); None for other records and those journaled before.
    # Shown, never replayed: a call is matched by its digest.
    arguments: str | None = None

    def evolve(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)

    def numbered(self, seq: int) -> Record:
        """This record at `seq` (what every write does to every record: spelled
        out, because `dataclasses.replace` costs ~10 µs a call)."""
        return Record(seq, self.addr, self.attempt, self.kind, self.name, self.digest,
                      self.status, self.payload, self.epoch, self.at, self.arguments)


@dataclasses.dataclass(frozen=True, slots=True)
class Fence:
    """What a write must prove: this worker still holds this run at this epoch."""

    run_id: str
    epoch: int
    worker_id: str


class Boundary(enum.StrEnum):
    """Where the crash matrix (`stead.testing`) kills a worker."""

    NONE = "none"  # the reference run: no crash
    BEFORE = "before"  # just before a journal write commits
    AFTER = "after"  # just after it committed
    IN_SEND = "in_send"  # inside an effect's function: its intent committed, no outcome yet
    WAITING = "waiting"  # while the run is suspended; its event comes while no worker runs
    DELIVERY = "delivery"  # as the worker wakes for a delivered event


@dataclasses.dataclass(frozen=True, slots=True)
class SnapshotRow:
    """One durable snapshot of a run's workspace `name`, saved by the journal
    record at `seq`. `manifest` is the JSON list of its entries (see
    `stead.files.trees`), `tree` their sha256; `git` (JSON, or None) the commit,
    the uncommitted patch's blob and the untracked files of a git tree.
    `blobs` is where the file contents are: None for this database's
    `workspace_blobs` table, else an fsspec URL. `stored_bytes` counts the
    blob bytes this save added (the rest were stored already)."""

    run_id: str
    name: str
    seq: int
    epoch: int
    worker_id: str
    tree: str
    manifest: str
    git: str | None
    files: int
    bytes: int
    stored_bytes: int
    blobs: str | None
    source: str
    at: float

    def evolve(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)
