"""What one `stead.contrib.strands.run` shares with the middleware it
registers on the agent: the workflow's `run`, the scope its calls are
addressed in, the tools declared as effects or needing approval, and how many
times the agent was resumed after an interrupt. The middleware finds it in a
context variable, so an agent outside a stead run is left as it is."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

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
    # What stopped a journaled call (a stop for a person, a drain, a replay
    # that no longer matches): once set, every later call of the agent raises
    # it again, and `run` raises it when the agent returns.
    stopped: BaseException | None = None

    def escape(self, error: BaseException) -> Escape:
        """`error` as it leaves a middleware: a BaseException, which Strands'
        tool executor does not turn into a tool's error result for the model."""
        if self.stopped is None:
            self.stopped = error
        return Escape(self.stopped)

    def check(self) -> None:
        if self.stopped is not None:
            raise Escape(self.stopped)


class Escape(BaseException):
    """What stopped a journaled call, on its way out of the agent to `run`.
    Strands' concurrent tool executor drops a BaseException a tool task
    raises, so each later call raises it again (`Session.check`)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


# Set around the agent's invocation by `run`; cleared inside each journaled
# call (a tool's own code is not the workflow's).
CURRENT: ContextVar[Session | None] = ContextVar("stead_strands_session", default=None)
# The operation of the effect a tool runs in (`stead.contrib.strands.operation()`).
OPERATION: ContextVar[stead.Operation | None] = ContextVar("stead_strands_operation",
                                                           default=None)


async def guarded(session: Session, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """`events`, whatever stops them leaving as `session.escape(error)`."""
    while True:
        try:
            event = await anext(events)
        except StopAsyncIteration:
            return
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except BaseException as error:
            raise session.escape(error) from None
        yield event


@contextmanager
def bound(session: Session | None) -> Iterator[None]:
    token = CURRENT.set(session)
    try:
        yield
    finally:
        CURRENT.reset(token)
