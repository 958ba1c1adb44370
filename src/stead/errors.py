"""Every error stead raises on purpose derives from `SteadError`.

Messages say what happened and what to do next, because they are read by an
operator at the moment something went wrong.
"""

from __future__ import annotations


class SteadError(Exception):
    """Base of every error stead raises on purpose."""


class StoreError(SteadError):
    """The store could not be opened, read or written."""


class StoreUnavailable(StoreError):
    """The database is locked, unreadable or unreachable; nothing was written."""


class CorruptRecord(StoreError):
    """A stored row cannot be decoded; it is left untouched for a human."""


class StaleLease(SteadError):
    """This worker no longer holds the run: another worker took it over (a newer
    epoch) or it was cancelled. The write was rejected; stop touching the run."""


class SerializationError(SteadError):
    """A value cannot be stored as JSON (stead never pickles)."""


class UnknownWorkflow(SteadError):
    """No workflow is registered under that name (and version)."""


class InvalidInput(SteadError):
    """The arguments do not fit the workflow's parameters or declared types."""


class UnknownRun(SteadError):
    """No run has that id."""


class NonDeterminism(SteadError):
    """Replayed code asked for something other than what the journal recorded."""


class WaitNotOpen(SteadError):
    """The wait is no longer open (consumed, expired or revoked)."""

    def __init__(self, wait_id: str, state: str) -> None:
        super().__init__(f"wait {wait_id} is {state}")
        self.wait_id = wait_id
        self.state = state


class NotStopped(SteadError):
    """A decision was given for a run that is not stopped waiting for one."""


class StepError(SteadError):
    """A step raised. Live and on replay the workflow sees this same error, built
    from the journal (`error_type`, `message`), so its control flow is the same."""

    def __init__(self, step: str, error_type: str, message: str, attempts: int = 1) -> None:
        super().__init__(
            f"step {step!r} failed after {attempts} attempt(s): {error_type}: {message}"
        )
        self.step = step
        self.error_type = error_type
        self.message = message
        self.attempts = attempts


class RunFailed(SteadError):
    """The run ended without a result (failed, cancelled or stopped for a human)."""

    def __init__(self, run_id: str, status: str, error: object) -> None:
        super().__init__(f"run {run_id} ended as {status}: {error}")
        self.run_id = run_id
        self.status = status
        self.error = error
