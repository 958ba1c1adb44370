"""Deterministic call addresses, so concurrency inside a workflow replays.

A run's calls are numbered per *branch*: the workflow's own task is the root
branch; every task the workflow code creates (`asyncio.gather`, `create_task`)
becomes a child branch numbered in creation order, which is program order and
therefore the same live and on replay. A call's address is its branch path
plus its index in the branch, reserved when the call is made. Completion order
(which varies with timing) never enters an address.

Tasks created while user step code runs (an HTTP client's internals, say) are
not branches: step code runs with no branch set, so it does not shift the
numbering, and it runs only live, never on replay.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine, Generator
from contextlib import AbstractContextManager
from typing import Any


class Branch:
    __slots__ = ("_calls", "_children", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self._calls = 0
        self._children = 0

    def next_address(self) -> str:
        index = self._calls
        self._calls += 1
        return f"{self.path}{index}"

    def peek(self) -> str:
        return f"{self.path}{self._calls}"

    def child(self) -> Branch:
        index = self._children
        self._children += 1
        return Branch(f"{self.path}b{index}.")


current: contextvars.ContextVar[Branch | None] = contextvars.ContextVar(
    "stead_branch", default=None
)


def reserve() -> str:
    branch = current.get()
    if branch is None:
        raise RuntimeError(
            "run.* was called outside the workflow's control code (from inside a step "
            "function, or from a task the runtime does not see): call it from the workflow"
        )
    return branch.next_address()


def peek() -> str:
    """The address the next `reserve` gives, reserving nothing."""
    branch = current.get()
    if branch is None:
        return reserve()  # raises, saying where run.* may be called
    return branch.peek()


class _OutsideBranches:
    # A class, not a generator: entered around every step's call and store
    # call, where `contextmanager`'s generator costs a few µs each time.
    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = current.set(None)

    def __exit__(self, *exc: object) -> None:
        current.reset(self._token)


def outside_branches() -> AbstractContextManager[None]:
    """Run user step code with no branch, so tasks it creates are not numbered."""
    return _OutsideBranches()


def _branching_factory(previous: Any) -> Any:
    def factory(
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
        **kwargs: Any,
    ) -> asyncio.Future[Any]:
        parent = current.get()
        if parent is not None:
            ctx = kwargs.get("context") or contextvars.copy_context()
            ctx.run(current.set, parent.child())
            kwargs["context"] = ctx
        if previous is not None:
            task: asyncio.Future[Any] = previous(loop, coro, **kwargs)
        else:
            task = asyncio.Task(coro, loop=loop, **kwargs)
        owner = asyncio.current_task(loop) if parent is not None else None
        if owner is not None and isinstance(task, asyncio.Task):
            task.set_name(owner.get_name())  # a run's task names the run (see `leases`)
        return task

    factory.stead_branching = True  # type: ignore[attr-defined]
    return factory


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Number the tasks workflows create on `loop` (idempotent; keeps any
    task factory already installed, calling it underneath)."""
    previous = loop.get_task_factory()
    if previous is not None and getattr(previous, "stead_branching", False):
        return
    loop.set_task_factory(_branching_factory(previous))
