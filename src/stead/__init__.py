"""stead: durable execution for AI agents. Resume, don't rerun."""

from stead.app import App, Workflow
from stead.client import Client, RunInfo
from stead.clock import Clock, FakeClock, SystemClock
from stead.effects import EffectCompensated, EffectFailed
from stead.errors import (
    CorruptRecord,
    InvalidInput,
    NonDeterminism,
    NotStopped,
    RunFailed,
    SerializationError,
    StaleLease,
    SteadError,
    StepError,
    StoreError,
    StoreUnavailable,
    UnknownRun,
    UnknownWorkflow,
)
from stead.llm import Completion, Model, ScriptedModel, ScriptExhausted, ToolCall, Usage
from stead.outcomes import Operation, Outcome, OutcomeUncertain
from stead.records import Record, ResumeRecord
from stead.retry import Retry
from stead.run import Run
from stead.store import Store, open_store
from stead.worker import Worker, WorkerOptions

__version__ = "0.1.0"

__all__ = [
    "App",
    "Client",
    "Clock",
    "Completion",
    "CorruptRecord",
    "EffectCompensated",
    "EffectFailed",
    "FakeClock",
    "InvalidInput",
    "Model",
    "NonDeterminism",
    "NotStopped",
    "Operation",
    "Outcome",
    "OutcomeUncertain",
    "Record",
    "ResumeRecord",
    "Retry",
    "Run",
    "RunFailed",
    "RunInfo",
    "ScriptExhausted",
    "ScriptedModel",
    "SerializationError",
    "StaleLease",
    "SteadError",
    "StepError",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "SystemClock",
    "ToolCall",
    "UnknownRun",
    "UnknownWorkflow",
    "Usage",
    "Worker",
    "WorkerOptions",
    "Workflow",
    "__version__",
    "open_store",
]
