"""The BaseExceptions that unwind a workflow's body: a drain, a dry replay's
frontier, a stop for a human, a continuation. Workflow code cannot swallow
them with `except Exception`; a task group in it (asyncio's, or anyio's, as an
MCP client session holds) wraps them in an exception group, which `unwrapped`
takes off again."""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from typing import TypeVar

from stead.records import RunStatus

T = TypeVar("T")


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


# What unwinds a workflow on stead's behalf: found in an exception group, it is
# what ended the workflow, whatever else the group holds.
UNWINDING = (Drain, Frontier, Stop, Continued)


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions an exception group holds, nested groups flattened
    (`[exc]` for any other exception)."""
    return list(_leaves(exc)) if isinstance(exc, BaseExceptionGroup) else [exc]


def cause(exc: BaseException) -> BaseException:
    """What ended a workflow that raised `exc`: for an exception group, the
    first of stead's own unwinding exceptions in it, else the one exception it
    holds; otherwise (or when it holds several failures) `exc` itself."""
    held = leaves(exc)
    for leaf in held:
        if isinstance(leaf, UNWINDING):
            return leaf
    return held[0] if len(held) == 1 else exc


async def unwrapped(body: Awaitable[T]) -> T:
    """`await body`; an exception group raised through it comes out as its
    `cause`, so a stop or a drain inside a task group is still one, and a
    failure shows its own type and message rather than the group's."""
    try:
        return await body
    except BaseExceptionGroup as group:
        found = cause(group)
        if found is group:
            raise
    # Raised outside the handler: the exception keeps its own context and cause.
    raise found
