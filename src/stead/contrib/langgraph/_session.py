"""What one `stead.contrib.langgraph.run` shares with the nodes and tasks it
journals: the workflow's `run`, the scope their calls are addressed in, which
pass of the graph this is, and the interrupts each node has raised so far."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import stead
from stead.contrib._scope import Scope


@dataclasses.dataclass
class Session:
    run: stead.Run
    scope: Scope
    # Each answered interrupt resumes the graph in a new pass: a node that runs
    # again in a later pass is a new call, journaled apart from its earlier run.
    passes: int = 0
    # By node execution (its step and path): the values of the interrupts it
    # raised, in order, so a replayed one raises its last again (see `_nodes`).
    interrupts: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    # By pass and node execution: how many times LangGraph called it (its
    # retry policy calls a failed node again), each call journaled apart.
    calls: Counter[str] = dataclasses.field(default_factory=Counter)


# Set by `run` around the graph, and cleared inside each journaled node: code
# in a node is not the run's own code.
CURRENT: ContextVar[Session | None] = ContextVar("stead_langgraph_session", default=None)


@contextmanager
def bound(session: Session | None) -> Iterator[None]:
    token = CURRENT.set(session)
    try:
        yield
    finally:
        CURRENT.reset(token)
