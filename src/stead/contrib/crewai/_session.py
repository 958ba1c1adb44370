"""What one `stead.contrib.crewai.kickoff` shares with the models, tools and
feedback it journals: the workflow's `run`, the scope its calls are addressed
in, and the loop the workflow runs on.

CrewAI runs much of its own code in threads (a sync flow method, an agent's
steps). A call journaled from such a thread is sent to the workflow's loop and
waited for there (`blocking`): the workflow is awaiting CrewAI meanwhile, so
its loop is free, and the thread's contextvars (the branch, this session)
travel with the call."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import stead
from stead import addresses, errors
from stead.contrib._scope import Scope

T = TypeVar("T")
CURRENT: ContextVar[Session | None] = ContextVar("stead_crewai_session", default=None)


@dataclasses.dataclass
class Session:
    run: stead.Run
    scope: Scope
    loop: asyncio.AbstractEventLoop
    on_approval: Any = None
    approval_expires_in: Any = None
    on_text: Any = None  # where a streamed model call's text deltas go, live

    def blocking(self, call: Coroutine[Any, Any, T]) -> T:
        """Run `call` on the workflow's loop from one of CrewAI's threads."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run_coroutine_threadsafe(call, self.loop).result()
        call.close()
        raise errors.SteadError(
            "a CrewAI call journaled by stead ran synchronously on the workflow's event loop: "
            "kick the crew off with `await stead.contrib.crewai.kickoff(run, crew)`, or call "
            "it from a sync flow method (CrewAI runs those in a thread)")


def journaling() -> Session | None:
    """The session whose calls are journaled here: none inside a step's or an
    effect's own code (a flow method, a tool's body), whose record covers them."""
    session = CURRENT.get()
    return session if session is not None and addresses.current.get() is not None else None


@contextmanager
def bound(session: Session) -> Iterator[None]:
    token = CURRENT.set(session)
    try:
        yield
    finally:
        CURRENT.reset(token)
