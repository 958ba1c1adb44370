"""What one `stead.contrib.strands.run` shares with the middleware it
registers on the agent: the workflow's `run`, the scope its calls are
addressed in, the tools declared as effects or needing approval, and how many
times the agent was resumed after an interrupt. The middleware finds it in a
context variable, so an agent outside a stead run is left as it is."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

import stead
from stead.contrib._effect import Effect
from stead.contrib._scope import Scope


@dataclasses.dataclass
class Session:
    run: stead.Run
    scope: Scope
    effects: Mapping[str, Effect]
    approvals: frozenset[str]
    # How many times the agent was resumed after an interrupt: a tool call
    # interrupted in one pass runs again from its start in the next.
    passes: int = 0
    calls: Counter[str] = dataclasses.field(default_factory=Counter)


# Set around the agent's invocation by `run`; cleared inside each journaled
# call (a tool's own code is not the workflow's).
CURRENT: ContextVar[Session | None] = ContextVar("stead_strands_session", default=None)
# The operation of the effect a tool runs in (`stead.contrib.strands.operation()`).
OPERATION: ContextVar[stead.Operation | None] = ContextVar("stead_strands_operation",
                                                           default=None)


@contextmanager
def bound(session: Session | None) -> Iterator[None]:
    token = CURRENT.set(session)
    try:
        yield
    finally:
        CURRENT.reset(token)
