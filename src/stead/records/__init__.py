"""The rows stead stores, as frozen records, and the closed sets of values
their fields take.

A run's journal is an append-only list of `Record`s. `seq` is the position in
commit order (gapless, one writer at a time); `addr` is the call's deterministic
identity in the workflow code (see `addresses`), which is what replay matches.

Statuses, kinds, states, verdicts, rejection reasons and resume classes are
`StrEnum`s: a member is a `str` equal to its value, so it is stored, compared,
hashed, formatted and written as JSON exactly as that string. Rows read from
the store may carry the plain string instead of the member; code therefore
compares these fields with `==` and `in`, never with `is`, `isinstance` or
`.value`.

The records live in modules by what they describe: `journal` (a run's
records, the fence its writes prove and the snapshots they save), `runs`
(the run's row, its intent, state, operator actions and lineage), `waits`
(waits, delivered events and their judgement), `resumes` (what a takeover
found and did), `fleet` (the workers' hosts, backlog and schedules) and
`histories` (a run's history forked, migrated or exported). Every name is
importable from `stead.records`, and imported with its module when first
used (PEP 562, as in `stead`): a store that lists runs builds none of the
records of histories.

Every record has a docstring: for a class without one, `dataclasses` writes
one from `inspect.signature` as the module is imported (about 0.3 ms each).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stead import lazy

if TYPE_CHECKING:
    from stead.records.fleet import (
        Backlog,
        HostRole,
        HostRow,
        Liveness,
        Missed,
        Presence,
        ScheduleRow,
        Stranded,
        WorkerLiveness,
    )
    from stead.records.histories import (
        ConversationPart,
        FindingKind,
        MigrationPlan,
        MigrationRow,
        NewFork,
        RunExport,
    )
    from stead.records.journal import (
        KINDS,
        RECORD_STATUSES,
        Boundary,
        Fence,
        Record,
        RecordKind,
        RecordStatus,
        SnapshotRow,
    )
    from stead.records.resumes import (
        EffectReplay,
        ResumeClass,
        ResumeDetails,
        ResumeRecord,
        StaleCause,
        StaleOutcome,
        TakeoverContext,
        UnknownOutcome,
    )
    from stead.records.runs import (
        STOPPED,
        TERMINAL,
        ActionOutcome,
        ActionRow,
        IntentRow,
        Lineage,
        LineageKind,
        Link,
        NewRun,
        RunRow,
        RunStatus,
        StateRow,
        task_taken,
    )
    from stead.records.waits import (
        POLICY_VERSION_KEY,
        UNAUTHENTICATED,
        DeliveryContext,
        EventRow,
        Judgement,
        RejectReason,
        Verdict,
        WaitRow,
        WaitState,
    )

_MODULES: dict[str, tuple[str, ...]] = {
    "fleet": ("Backlog", "HostRole", "HostRow", "Liveness", "Missed", "Presence", "ScheduleRow",
              "Stranded", "WorkerLiveness"),
    "histories": ("ConversationPart", "FindingKind", "MigrationPlan", "MigrationRow", "NewFork",
                  "RunExport"),
    "journal": ("KINDS", "RECORD_STATUSES", "Boundary", "Fence", "Record", "RecordKind",
                "RecordStatus", "SnapshotRow"),
    "resumes": ("EffectReplay", "ResumeClass", "ResumeDetails", "ResumeRecord", "StaleCause",
                "StaleOutcome", "TakeoverContext", "UnknownOutcome"),
    "runs": ("STOPPED", "TERMINAL", "ActionOutcome", "ActionRow", "IntentRow", "Lineage",
             "LineageKind", "Link", "NewRun", "RunRow", "RunStatus", "StateRow", "task_taken"),
    "waits": ("POLICY_VERSION_KEY", "UNAUTHENTICATED", "DeliveryContext", "EventRow", "Judgement",
              "RejectReason", "Verdict", "WaitRow", "WaitState"),
}
_WHERE = {name: f"stead.records.{module}" for module, names in _MODULES.items()
          for name in names}

__all__ = [
    "KINDS",
    "POLICY_VERSION_KEY",
    "RECORD_STATUSES",
    "STOPPED",
    "TERMINAL",
    "UNAUTHENTICATED",
    "ActionOutcome",
    "ActionRow",
    "Backlog",
    "Boundary",
    "ConversationPart",
    "DeliveryContext",
    "EffectReplay",
    "EventRow",
    "Fence",
    "FindingKind",
    "HostRole",
    "HostRow",
    "IntentRow",
    "Judgement",
    "Lineage",
    "LineageKind",
    "Link",
    "Liveness",
    "MigrationPlan",
    "MigrationRow",
    "Missed",
    "NewFork",
    "NewRun",
    "Presence",
    "Record",
    "RecordKind",
    "RecordStatus",
    "RejectReason",
    "ResumeClass",
    "ResumeDetails",
    "ResumeRecord",
    "RunExport",
    "RunRow",
    "RunStatus",
    "ScheduleRow",
    "SnapshotRow",
    "StaleCause",
    "StaleOutcome",
    "StateRow",
    "Stranded",
    "TakeoverContext",
    "UnknownOutcome",
    "Verdict",
    "WaitRow",
    "WaitState",
    "WorkerLiveness",
    "task_taken",
]


__getattr__, __dir__ = lazy.names("stead.records", _WHERE, globals(), __all__)
