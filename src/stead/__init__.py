"""stead: durable execution for AI agents. Resume, don't rerun."""

from stead.app import App, Workflow
from stead.client import Client, MigrationReport, RunInfo
from stead.clock import Clock, FakeClock, SystemClock
from stead.errors import (
    CorruptRecord,
    DatabaseMissing,
    EffectCompensated,
    EffectFailed,
    GrantRefused,
    GrantWidening,
    InvalidInput,
    InvalidIntent,
    KeysUnavailable,
    MigrationRefused,
    NonDeterminism,
    NotStopped,
    OutcomeUncertain,
    RunFailed,
    ScriptExhausted,
    SecretInJournal,
    SerializationError,
    StaleLease,
    StateConflict,
    StatusNotReached,
    SteadError,
    StepError,
    StoreError,
    StoreUnavailable,
    TokenHidden,
    UnknownRun,
    UnknownWorkflow,
    WaitExpired,
    WaitNotOpen,
    WaitRevoked,
)
from stead.exports import StoredRun
from stead.intent import Budget, Grant, Intent
from stead.keys import Keyring
from stead.llm import Completion, Model, ScriptedModel, ToolCall, Usage
from stead.migrations import Migrated, MigrationView
from stead.outcomes import Operation, Outcome
from stead.policy import Action, Continue, Pause, Terminate
from stead.records import (
    HostRow,
    MigrationRow,
    Record,
    ResumeDetails,
    ResumeRecord,
    UnknownOutcome,
)
from stead.retry import Retry
from stead.run import Run
from stead.state import Facts
from stead.store import Store, open_store
from stead.waits import Accepted, Delivery, Duplicate, Rejected, Token, Wait
from stead.worker import Worker, WorkerOptions

__version__ = "0.1.0"

__all__ = [
    "Accepted",
    "Action",
    "App",
    "Budget",
    "Client",
    "Clock",
    "Completion",
    "Continue",
    "CorruptRecord",
    "DatabaseMissing",
    "Delivery",
    "Duplicate",
    "EffectCompensated",
    "EffectFailed",
    "Facts",
    "FakeClock",
    "Grant",
    "GrantRefused",
    "GrantWidening",
    "HostRow",
    "Intent",
    "InvalidInput",
    "InvalidIntent",
    "Keyring",
    "KeysUnavailable",
    "Migrated",
    "MigrationRefused",
    "MigrationReport",
    "MigrationRow",
    "MigrationView",
    "Model",
    "NonDeterminism",
    "NotStopped",
    "Operation",
    "Outcome",
    "OutcomeUncertain",
    "Pause",
    "Record",
    "Rejected",
    "ResumeDetails",
    "ResumeRecord",
    "Retry",
    "Run",
    "RunFailed",
    "RunInfo",
    "ScriptExhausted",
    "ScriptedModel",
    "SecretInJournal",
    "SerializationError",
    "StaleLease",
    "StateConflict",
    "StatusNotReached",
    "SteadError",
    "StepError",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StoredRun",
    "SystemClock",
    "Terminate",
    "Token",
    "TokenHidden",
    "ToolCall",
    "UnknownOutcome",
    "UnknownRun",
    "UnknownWorkflow",
    "Usage",
    "Wait",
    "WaitExpired",
    "WaitNotOpen",
    "WaitRevoked",
    "Worker",
    "WorkerOptions",
    "Workflow",
    "__version__",
    "open_store",
]
