"""stead: durable execution for AI agents. Resume, don't rerun.

The public names, by what a reader looks for (`tests/test_public_api.py` pins
the same groups):

- building an app: `App`, `Workflow`, `Run` (what a workflow calls), `Retry`,
  `Queue`, `Missed` (a schedule's missed ticks);
- driving runs: `Client`, `RunInfo`, `Start`, `Worker`, `WorkerOptions`,
  `prune`, `PruneReport`;
- the store and time: `Store`, `open_store`, `Keyring`, `Clock`,
  `SystemClock`, `FakeClock`;
- the journal: `Record`, `ResumeRecord`, `ResumeDetails`, `UnknownOutcome`,
  `Lineage`, `LineageKind`, `Link`;
- effects: `Operation`, `Outcome`, `Compensation`;
- waits: `Wait`, `Token`, `Delivery`, `Accepted`, `Rejected`, `Duplicate`,
  `Operator`;
- task state and streams: `Facts`, `Stream`, `StreamEntry`, `EntryKind`;
- models: `Model`, `ScriptedModel`, `Completion`, `ToolCall`, `Usage`;
- intent and authority: `Intent`, `Grant`, `Budget`, `Action`, `Continue`,
  `Pause`, `Terminate`, `Role`;
- workspaces: `Workspace`, `WorkspacePath`, `Snapshot`, `SnapshotRow`,
  `Fingerprint`;
- deploys: `Migrated`, `MigrationView`, `MigrationReport`, `MigrationRow`,
  `StoredRun`, `HostRow`;
- errors: `SteadError` and the common ones of each group of `stead.errors`
  (the store; input refused at the door; workflows and the journal; runs seen
  from outside; waits; effects; intent and authority; workspaces; deploys),
  which holds every error stead raises.

Integrations with agent SDKs live in `stead.contrib`, model adapters in
`stead.llm`; neither is named here.

A name is imported when it is first used (`stead.Client`, `from stead import
Client`), so `import stead` costs almost nothing: a command that lists runs
need not load what runs workflows.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stead.app import App, Workflow
    from stead.client import Client, MigrationReport, RunInfo
    from stead.clock import Clock, FakeClock, SystemClock
    from stead.errors import (
        ChildFailed,
        CorruptRecord,
        DatabaseMissing,
        DeadlineExceeded,
        EffectCompensated,
        EffectFailed,
        ForkRefused,
        GrantRefused,
        GrantWidening,
        InvalidInput,
        InvalidIntent,
        InvalidSchedule,
        InvalidStart,
        InvalidTenant,
        InvalidValue,
        KeysUnavailable,
        MigrationRefused,
        NonDeterminism,
        NotAllowed,
        NotStopped,
        OutcomeUncertain,
        OutsideTenant,
        RunEnded,
        RunFailed,
        RunMovedOn,
        ScriptExhausted,
        SecretInJournal,
        SerializationError,
        StaleLease,
        StateConflict,
        StatusNotReached,
        SteadError,
        StepError,
        StepTimeout,
        StoreError,
        StoreRejected,
        StoreUnavailable,
        StreamClosed,
        TaskMismatch,
        TokenHidden,
        UnknownAction,
        UnknownQueue,
        UnknownRun,
        UnknownWorkflow,
        WaitExpired,
        WaitNotOpen,
        WaitPolicyChanged,
        WaitRevoked,
        WorkspaceChanged,
        WorkspaceError,
        WorkspaceEscape,
        WorkspaceMismatch,
        WorkspaceOutsideRoot,
        WorkspaceTooLarge,
        WorkspaceUnsafe,
    )
    from stead.exports import StoredRun
    from stead.intent import Budget, Grant, Intent
    from stead.keys import Keyring
    from stead.llm.model import Completion, Model, ToolCall, Usage
    from stead.llm.scripted import ScriptedModel
    from stead.migrations import Migrated, MigrationView
    from stead.outcomes import Compensation, Operation, Outcome
    from stead.policy import Action, Continue, Pause, Terminate
    from stead.queues import Queue
    from stead.records import (
        HostRow,
        Lineage,
        LineageKind,
        Link,
        MigrationRow,
        Missed,
        Record,
        ResumeDetails,
        ResumeRecord,
        SnapshotRow,
        UnknownOutcome,
    )
    from stead.release import __version__
    from stead.retention import PruneReport, prune
    from stead.retry import Retry
    from stead.roles import Role
    from stead.run import Run
    from stead.starts import Start
    from stead.store import Store, open_store
    from stead.stream_records import EntryKind, StreamEntry
    from stead.worker import Worker, WorkerOptions
    from stead.workflow.fingerprints import Fingerprint
    from stead.workflow.state import Facts
    from stead.workflow.streams import Stream
    from stead.workflow.waits import Accepted, Delivery, Duplicate, Operator, Rejected, Token, Wait
    from stead.workflow.workspaces import Snapshot, Workspace, WorkspacePath

# Each public name and the module it lives in (below `stead.`), imported on
# first use. The imports above say the same for the type checker; a test keeps
# the two in step.
_ERRORS = (
    "ChildFailed", "CorruptRecord", "DatabaseMissing", "DeadlineExceeded",
    "EffectCompensated", "EffectFailed", "ForkRefused", "GrantRefused", "GrantWidening",
    "InvalidInput", "InvalidIntent", "InvalidSchedule", "InvalidStart", "InvalidTenant",
    "InvalidValue",
    "KeysUnavailable", "MigrationRefused", "NonDeterminism", "NotAllowed", "NotStopped",
    "OutcomeUncertain", "OutsideTenant", "RunEnded", "RunFailed", "RunMovedOn", "ScriptExhausted",
    "SecretInJournal", "SerializationError", "StaleLease", "StateConflict",
    "StatusNotReached", "SteadError", "StepError", "StepTimeout", "StoreError",
    "StoreRejected", "StoreUnavailable", "StreamClosed", "TaskMismatch", "TokenHidden",
    "UnknownAction", "UnknownQueue", "UnknownRun", "UnknownWorkflow", "WaitExpired",
    "WaitNotOpen", "WaitPolicyChanged", "WaitRevoked", "WorkspaceChanged", "WorkspaceError",
    "WorkspaceEscape", "WorkspaceMismatch", "WorkspaceOutsideRoot", "WorkspaceTooLarge",
    "WorkspaceUnsafe",
)
_MODULES: dict[str, tuple[str, ...]] = {
    "app": ("App", "Workflow"),
    "client": ("Client", "MigrationReport", "RunInfo"),
    "clock": ("Clock", "FakeClock", "SystemClock"),
    "errors": _ERRORS,
    "exports": ("StoredRun",),
    "workflow.fingerprints": ("Fingerprint",),
    "intent": ("Budget", "Grant", "Intent"),
    "keys": ("Keyring",),
    "llm.model": ("Completion", "Model", "ToolCall", "Usage"),
    "llm.scripted": ("ScriptedModel",),
    "migrations": ("Migrated", "MigrationView"),
    "outcomes": ("Compensation", "Operation", "Outcome"),
    "policy": ("Action", "Continue", "Pause", "Terminate"),
    "queues": ("Queue",),
    "release": ("__version__",),
    "records": ("HostRow", "Lineage", "LineageKind", "Link", "MigrationRow", "Missed",
                "Record", "ResumeDetails", "ResumeRecord", "SnapshotRow", "UnknownOutcome"),
    "retention": ("PruneReport", "prune"),
    "retry": ("Retry",),
    "roles": ("Role",),
    "run": ("Run",),
    "starts": ("Start",),
    "workflow.state": ("Facts",),
    "store": ("Store", "open_store"),
    "stream_records": ("EntryKind", "StreamEntry"),
    "workflow.streams": ("Stream",),
    "workflow.waits": ("Accepted", "Delivery", "Duplicate", "Operator", "Rejected", "Token",
                       "Wait"),
    "worker": ("Worker", "WorkerOptions"),
    "workflow.workspaces": ("Snapshot", "Workspace", "WorkspacePath"),
}
_WHERE = {name: f"stead.{module}" for module, names in _MODULES.items() for name in names}

__all__ = [
    "Accepted",
    "Action",
    "App",
    "Budget",
    "ChildFailed",
    "Client",
    "Clock",
    "Compensation",
    "Completion",
    "Continue",
    "CorruptRecord",
    "DatabaseMissing",
    "DeadlineExceeded",
    "Delivery",
    "Duplicate",
    "EffectCompensated",
    "EffectFailed",
    "EntryKind",
    "Facts",
    "FakeClock",
    "Fingerprint",
    "ForkRefused",
    "Grant",
    "GrantRefused",
    "GrantWidening",
    "HostRow",
    "Intent",
    "InvalidInput",
    "InvalidIntent",
    "InvalidSchedule",
    "InvalidStart",
    "InvalidTenant",
    "InvalidValue",
    "Keyring",
    "KeysUnavailable",
    "Lineage",
    "LineageKind",
    "Link",
    "Migrated",
    "MigrationRefused",
    "MigrationReport",
    "MigrationRow",
    "MigrationView",
    "Missed",
    "Model",
    "NonDeterminism",
    "NotAllowed",
    "NotStopped",
    "Operation",
    "Operator",
    "Outcome",
    "OutcomeUncertain",
    "OutsideTenant",
    "Pause",
    "PruneReport",
    "Queue",
    "Record",
    "Rejected",
    "ResumeDetails",
    "ResumeRecord",
    "Retry",
    "Role",
    "Run",
    "RunEnded",
    "RunFailed",
    "RunInfo",
    "RunMovedOn",
    "ScriptExhausted",
    "ScriptedModel",
    "SecretInJournal",
    "SerializationError",
    "Snapshot",
    "SnapshotRow",
    "StaleLease",
    "Start",
    "StateConflict",
    "StatusNotReached",
    "SteadError",
    "StepError",
    "StepTimeout",
    "Store",
    "StoreError",
    "StoreRejected",
    "StoreUnavailable",
    "StoredRun",
    "Stream",
    "StreamClosed",
    "StreamEntry",
    "SystemClock",
    "TaskMismatch",
    "Terminate",
    "Token",
    "TokenHidden",
    "ToolCall",
    "UnknownAction",
    "UnknownOutcome",
    "UnknownQueue",
    "UnknownRun",
    "UnknownWorkflow",
    "Usage",
    "Wait",
    "WaitExpired",
    "WaitNotOpen",
    "WaitPolicyChanged",
    "WaitRevoked",
    "Worker",
    "WorkerOptions",
    "Workflow",
    "Workspace",
    "WorkspaceChanged",
    "WorkspaceError",
    "WorkspaceEscape",
    "WorkspaceMismatch",
    "WorkspaceOutsideRoot",
    "WorkspacePath",
    "WorkspaceTooLarge",
    "WorkspaceUnsafe",
    "__version__",
    "open_store",
    "prune",
]


def __getattr__(name: str) -> Any:
    # PEP 562: called only for a name not yet in this module's namespace. The
    # value is kept there, so the next use is an ordinary attribute read.
    where = _WHERE.get(name)
    if where is None:
        # A submodule (`stead.errors`, `stead.contrib`), which `import stead`
        # does not import but `stead.errors.StepError` may still name.
        if not name.startswith("_") and importlib.util.find_spec(f"stead.{name}") is not None:
            return importlib.import_module(f"stead.{name}")
        raise AttributeError(f"module 'stead' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
