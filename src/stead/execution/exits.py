"""The BaseExceptions that unwind a workflow's body: a drain, a dry replay's
frontier, a stop for a human, a continuation. Workflow code cannot swallow
them with `except Exception`."""

from __future__ import annotations

from stead.records import RunStatus


class Drain(BaseException):
    """Raised at a call boundary when the worker is shutting down gracefully.
    A BaseException so a workflow's `except Exception` cannot swallow it."""


class Frontier(BaseException):
    """Raised in a dry replay (`ExecutionOptions.dry`) where the workflow
    would do something live: call a function, write, wait, sleep. The replay
    ends there, having done nothing."""


class Stop(BaseException):
    """Unwinds the workflow to stop the run for a human (`status`, with `error`
    saying what is known). A BaseException, so workflow code cannot swallow it."""

    def __init__(self, status: RunStatus, error: dict[str, object]) -> None:
        super().__init__(error.get("message", status))
        self.status = status
        self.error = error


class Continued(BaseException):
    """Unwinds the workflow once `run.continue_as_new` committed: the run is
    over, its successor (`run_id`) exists. A BaseException, so workflow code
    cannot swallow it."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"continued as run {run_id}")
        self.run_id = run_id
