"""The public surface is deliberate: exactly these names."""

from __future__ import annotations

import stead

EXPECTED = {
    "__version__", "Accepted", "App", "Client", "Clock", "Completion", "CorruptRecord",
    "DeadlineExceeded", "Delivery", "Duplicate", "EffectCompensated", "EffectFailed", "Facts",
    "FakeClock",
    "InvalidInput", "Model", "NonDeterminism", "NotStopped", "open_store", "Operation",
    "Outcome", "OutcomeUncertain", "Record", "Rejected", "ResumeRecord", "Retry", "Run",
    "RunFailed", "RunInfo", "RunEnded", "ScriptedModel", "ScriptExhausted", "SerializationError",
    "StaleLease", "StateConflict", "SteadError", "StepError", "StepTimeout", "Store", "StoreError",
    "StoreUnavailable", "SystemClock", "Token", "ToolCall", "UnknownRun", "UnknownWorkflow",
    "Usage", "Wait", "WaitExpired", "WaitNotOpen", "WaitRevoked", "Worker", "WorkerOptions",
    "WaitPolicyChanged", "Workflow", "Keyring", "KeysUnavailable", "SecretInJournal", "TokenHidden",
    "DatabaseMissing", "StatusNotReached", "ResumeDetails", "UnknownOutcome",
    "Intent", "Grant", "Budget", "InvalidIntent", "GrantWidening", "GrantRefused",
    "Continue", "Pause", "Terminate", "Action",
    "Compensation", "ForkRefused", "TaskMismatch", "Lineage", "LineageKind", "Link",
    "Operator", "RunMovedOn", "UnknownAction", "NotAllowed", "Role",
    # deploys: migrations, exported histories, workers' heartbeats
    "Migrated", "MigrationView", "MigrationReport", "MigrationRow", "MigrationRefused",
    "StoredRun", "HostRow",
    "Workspace", "WorkspacePath", "Snapshot", "SnapshotRow", "Fingerprint", "WorkspaceError",
    "WorkspaceOutsideRoot",
    "WorkspaceEscape", "WorkspaceTooLarge", "WorkspaceChanged", "WorkspaceMismatch",
    "WorkspaceUnsafe",
    "ChildFailed", "InvalidSchedule", "Missed", "PruneReport", "prune",
    "Queue", "Start", "InvalidStart", "UnknownQueue",
    # refused at the door, refused by the database for good
    "InvalidValue", "StoreRejected",
    # durable streams
    "Stream", "StreamEntry", "EntryKind", "StreamClosed",
}


def test_exported_names_are_exactly_the_intended_ones() -> None:
    assert set(stead.__all__) == EXPECTED
    for name in stead.__all__:
        assert hasattr(stead, name)


def test_every_error_derives_from_stead_error() -> None:
    for name in stead.__all__:
        obj = getattr(stead, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, stead.SteadError), name
