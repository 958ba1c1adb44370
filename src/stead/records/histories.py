"""A run's history taken as a whole: copied into a fork, checked by a dry
replay, moved to another version by a migration, or exported before it is
deleted."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from stead.records.journal import Record
from stead.records.resumes import ResumeRecord
from stead.records.runs import IntentRow, NewRun, RunRow, StateRow
from stead.records.waits import EventRow, WaitRow


@dataclasses.dataclass(frozen=True, slots=True)
class ConversationPart:
    """A message (or a model call's request parameters) a run's model calls
    sent, as an export carries it: its name, the name of the message before
    it (None: a conversation's first, or parameters), its JSON text (see
    `stead.store.transactions.conversations`)."""

    name: str
    parent: str | None
    body: str


@dataclasses.dataclass(frozen=True, slots=True)
class NewFork:
    """A fork to create: the run `new` with the first `at_seq` records of run
    `parent_id`'s journal (`records`, as the fork replays them), its open
    `waits`, and the task state its prefix last saw (`state`, under the
    fork's own task key; None: nothing to copy)."""

    new: NewRun
    parent_id: str
    at_seq: int
    records: tuple[Record, ...]
    waits: tuple[WaitRow, ...]
    state: StateRow | None


class FindingKind(enum.StrEnum):
    """Why a dry replay (`stead replay-check`) says the code cannot interpret a run."""

    INCOMPATIBLE = "incompatible"  # the code calls something else than the journal says
    UNHOSTED = "unhosted"  # the app neither hosts the run's version nor migrates it
    MIGRATION = "migration"  # the migration that would move it is refused
    CORRUPT = "corrupt"  # the history cannot be read


@dataclasses.dataclass(frozen=True, slots=True)
class MigrationRow:
    """One migration applied to a run: from which version to which, the
    input before and after, the journal's length before and after, who and
    when (and at which epoch); `rolled_back_at`/`_by` once undone."""

    run_id: str
    number: int
    from_version: int
    to_version: int
    old_input: str
    new_input: str
    records_before: int
    records_after: int
    author: str
    at: float
    epoch: int
    rolled_back_at: float | None = None
    rolled_back_by: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class MigrationPlan:
    """What a migration writes: the run's new version and input, and the
    journal the new code replays (numbered from 0). `old_input` and
    `records_before` are what it was made from: if the run moved since, the
    store refuses it."""

    run_id: str
    from_version: int
    to_version: int
    old_input: str
    new_input: str
    records_before: int
    records: tuple[Record, ...]
    author: str


@dataclasses.dataclass(frozen=True, slots=True)
class RunExport:
    """Everything stored of one run, as retention exports it before deleting."""

    run: RunRow
    journal: tuple[Record, ...]
    resumes: tuple[ResumeRecord, ...]
    waits: tuple[WaitRow, ...]
    events: tuple[EventRow, ...]
    intents: tuple[IntentRow, ...]
    # The messages and parameters its model calls sent, by name.
    conversation: tuple[ConversationPart, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "run": dataclasses.asdict(self.run),
            "journal": [dataclasses.asdict(r) for r in self.journal],
            "resumes": [dataclasses.asdict(r) for r in self.resumes],
            "waits": [dataclasses.asdict(w) for w in self.waits],
            "events": [dataclasses.asdict(e) for e in self.events],
            "intents": [dataclasses.asdict(i) for i in self.intents],
            "conversation": [dataclasses.asdict(p) for p in self.conversation],
        }
