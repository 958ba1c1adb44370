"""What a takeover found and did: how it classed each journaled call, the
results it found no longer holding, what its replay did with each effect,
its audit record, and why a run stopped with an effect's outcome unknown."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from stead.records.journal import Record, RecordKind
from stead.records.runs import IntentRow, StateRow

if TYPE_CHECKING:  # a worker that resumes no wait imports none of its rows
    from stead.records.waits import EventRow, WaitRow

E = TypeVar("E", bound=enum.StrEnum)


class ResumeClass(enum.StrEnum):
    """How a takeover treats a journaled call; the resume record counts each."""

    REUSE = "reuse"  # an acknowledged outcome: returned from the journal
    NOT_STARTED = "not_started"  # an effect with no intent journaled: sent
    PENDING_EXTERNAL = "pending_external"  # accepted outside, no result: `check` is asked
    OUTCOME_UNKNOWN = "outcome_unknown"  # an intent and no outcome: resent, asked, or stopped
    REVALIDATE = "revalidate"  # a `fresh` proposal after a changed intent: asked again


class StaleCause(enum.StrEnum):
    """Why a takeover found a journaled result no longer holding."""

    FINGERPRINT = "fingerprint"  # the environment it was made in changed
    PROPOSAL = "proposal"  # a `fresh=` proposal after a changed intent
    CODE = "code"  # the step's body changed (see `stead.stepcode`)


class StaleOutcome(enum.StrEnum):
    """What a takeover did with a result no longer holding."""

    RERUN = "rerun"  # cut from there: made again
    PAUSED = "paused"  # something acted after it: the run paused for a person
    REUSED = "reused"  # reused as journaled, with a warning
    STOPPED = "stopped"  # the run stopped as incompatible_checkpoint


class EffectReplay(enum.StrEnum):
    """What a takeover's replay did with an effect it met (see `ResumeDetails.effects`)."""

    REUSED = "reused"  # its outcome was journaled: returned
    POLLED = "polled"  # accepted outside: its check asked with the external id
    RESENT = "resent"  # outcome unknown, idempotent: sent again with the same key
    CHECKED = "checked"  # outcome unknown: its check asked
    LEFT_UNKNOWN = "left unknown"  # outcome unknown, nothing to ask: the run stops


@dataclasses.dataclass(frozen=True, slots=True)
class ResumeDetails:
    """What a takeover found, typed: how many records the journal held, and
    how many replayed calls fell in each `ResumeClass` and were of each
    `RecordKind` by the time the resume record was written."""

    journal_records: int
    classes: Mapping[ResumeClass, int]
    kinds: Mapping[RecordKind, int]
    # The revalidation of the run's intent at this takeover: `snapshot` (what
    # it ran under), `diff` (what changed since the last), `decision` (the
    # policy's, with its reason and version). None for a run without intent
    # or policy.
    intent: Mapping[str, Any] | None = None
    # A migration or its rollback this resume record audits: who, when,
    # from which version to which, and the journal's length before and after.
    migration: Mapping[str, Any] | None = None
    # The workspaces restored before replay, by name: the snapshot (its
    # journal seq, tree hash, epoch) and the fresh directory it went into.
    workspaces: Mapping[str, Any] | None = None
    # What replay did with each effect it met before the record was written:
    # `{"name", "addr", "done": reused | polled | resent | checked | left
    # unknown, "key"?, "external_id"?}`, in the order met.
    effects: Sequence[Mapping[str, Any]] | None = None
    # Each journaled result replay found no longer holding, in the order met:
    # `{"call", "seq", "cause": fingerprint | proposal, "changed": ["part: old
    # -> new", ...], "done": rerun | paused}`.
    reran: Sequence[Mapping[str, Any]] | None = None
    # The task state the run resumed on: its version and a digest per key
    # (`worlds.world`; version 0: the task has no state yet). Every resume
    # record names it, with or without an intent; None in older records.
    world: Mapping[str, Any] | None = None
    # When the worker claimed the run (the store's clock, as `Record.at`):
    # where the takeover happened. The record's own `at` is its first write,
    # after replay. None in older records.
    claimed_at: float | None = None

    @classmethod
    def from_json(cls, text: str) -> ResumeDetails:
        """Read a resume record's `detail`; keys it lacks (older rows) count zero."""
        try:
            data = json.loads(text)
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        return cls(
            journal_records=int(data.get("journal_records", 0)),
            classes=_counts(data.get("classes"), ResumeClass),
            kinds=_counts(data.get("kinds"), RecordKind),
            intent=data["intent"] if isinstance(data.get("intent"), dict) else None,
            migration=data["migration"] if isinstance(data.get("migration"), dict) else None,
            workspaces=data["workspaces"] if isinstance(data.get("workspaces"), dict) else None,
            effects=[e for e in data["effects"] if isinstance(e, dict)]
            if isinstance(data.get("effects"), list) else None,
            reran=[e for e in data["reran"] if isinstance(e, dict)]
            if isinstance(data.get("reran"), list) else None,
            world=data["world"] if isinstance(data.get("world"), dict) else None,
            claimed_at=float(data["claimed_at"])
            if type(data.get("claimed_at")) in (int, float) else None,
        )

    def to_json(self) -> str:
        data: dict[str, Any] = {"journal_records": self.journal_records,
                                "classes": dict(self.classes), "kinds": dict(self.kinds)}
        if self.intent is not None:
            data["intent"] = dict(self.intent)
        if self.migration is not None:
            data["migration"] = dict(self.migration)
        if self.workspaces is not None:
            data["workspaces"] = dict(self.workspaces)
        if self.effects:
            data["effects"] = [dict(e) for e in self.effects]
        if self.reran:
            data["reran"] = [dict(e) for e in self.reran]
        if self.world is not None:
            data["world"] = dict(self.world)
        if self.claimed_at is not None:
            data["claimed_at"] = self.claimed_at
        return json.dumps(data)


def _counts(data: object, members: type[E]) -> dict[E, int]:
    if not isinstance(data, dict):
        return {}
    known = {m.value: m for m in members}
    return {known[k]: int(v) for k, v in data.items() if k in known}


@dataclasses.dataclass(frozen=True, slots=True)
class ResumeRecord:
    """The audit of one takeover, written with the first write after replay.
    `detail` is the stored JSON text; `details` reads it as `ResumeDetails`."""

    run_id: str
    epoch: int
    worker_id: str
    at: float
    from_seq: int
    code_version: str
    reused: int
    detail: str = "{}"

    @property
    def details(self) -> ResumeDetails:
        return ResumeDetails.from_json(self.detail)


@dataclasses.dataclass(frozen=True, slots=True)
class TakeoverContext:
    """What a takeover reads of a run, in one read: its journal (empty if not
    asked for), its intent's versions and its last resume record (for a run
    that is revalidated; else empty and None), its task's state (None:
    the task has none yet), which every resume record names, and the wait
    an event consumed last with that event (read with the journal; None:
    none was), which a run woken by a delivery replays from."""

    journal: Sequence[Record]
    intents: Sequence[IntentRow]
    last: ResumeRecord | None
    state: StateRow | None
    consumed: tuple[WaitRow, EventRow | None] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class UnknownOutcome:
    """Why a run stopped as `outcome_unknown`: the effect (`name`, its
    idempotency `key`, its `addr` in the workflow, the `attempt`), the
    `arguments` it was sent with, and what is `known` of its outcome. Decide
    it with `Client.reconcile` (or `stead reconcile`)."""

    name: str
    key: str
    addr: str
    attempt: int
    known: str
    arguments: Any = None

    @classmethod
    def from_error(cls, error: Mapping[str, Any]) -> UnknownOutcome | None:
        """Read the stop from a run's error; None if it names no effect."""
        if "effect" not in error or "key" not in error:
            return None
        return cls(
            name=str(error["effect"]), key=str(error["key"]), addr=str(error.get("addr", "")),
            attempt=int(error.get("attempt", 0)), known=str(error.get("known", "")),
            arguments=error.get("arguments"),
        )
