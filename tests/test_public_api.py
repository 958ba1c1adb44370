"""The public surface is deliberate: exactly these names."""

from __future__ import annotations

import stead

EXPECTED = {
    "__version__", "App", "Client", "Clock", "Completion", "CorruptRecord", "EffectCompensated",
    "EffectFailed", "FakeClock", "InvalidInput", "Model", "NonDeterminism", "NotStopped",
    "open_store", "Operation", "Outcome", "OutcomeUncertain", "Record", "ResumeRecord", "Retry",
    "Run", "RunFailed", "RunInfo", "ScriptedModel", "ScriptExhausted", "SerializationError",
    "StaleLease", "SteadError", "StepError", "Store", "StoreError", "StoreUnavailable",
    "SystemClock", "ToolCall", "UnknownRun", "UnknownWorkflow", "Usage", "Worker",
    "WorkerOptions", "Workflow",
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
