"""stead: durable execution for AI agents. Resume, don't rerun."""

from stead.app import App, Workflow
from stead.client import Client, RunInfo
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
    InvalidStart,
    KeysUnavailable,
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
    UnknownQueue,
    UnknownRun,
    UnknownWorkflow,
    WaitExpired,
    WaitNotOpen,
    WaitRevoked,
)
from stead.intent import Budget, Grant, Intent
from stead.keys import Keyring
from stead.llm import Completion, Model, ScriptedModel, ToolCall, Usage
from stead.outcomes import Operation, Outcome
from stead.policy import Action, Continue, Pause, Terminate
from stead.queues import Queue
from stead.records import Record, ResumeDetails, ResumeRecord, UnknownOutcome
from stead.retry import Retry
from stead.run import Run
from stead.starts import Start
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
    "Intent",
    "InvalidInput",
    "InvalidIntent",
    "InvalidStart",
    "Keyring",
    "KeysUnavailable",
    "Model",
    "NonDeterminism",
    "NotStopped",
    "Operation",
    "Outcome",
    "OutcomeUncertain",
    "Pause",
    "Queue",
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
    "Start",
    "StateConflict",
    "StatusNotReached",
    "SteadError",
    "StepError",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "SystemClock",
    "Terminate",
    "Token",
    "TokenHidden",
    "ToolCall",
    "UnknownOutcome",
    "UnknownQueue",
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
