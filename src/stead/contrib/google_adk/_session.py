"""What one `stead.contrib.google_adk.run` shares with the plugin it adds to
the runner: the workflow's `run`, the scope its calls are addressed in, the
root agent (to find each agent's model by name), the tools declared as
effects or needing approval, and where live text deltas go. The plugin finds
it in a context variable, so a runner outside a stead run is left as it is."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from google.adk.agents import BaseAgent

import stead
from stead.contrib._effect import Effect
from stead.contrib._scope import Scope

Ask = Callable[..., Any]


@dataclasses.dataclass
class Session:
    run: stead.Run
    scope: Scope
    root: BaseAgent
    effects: Mapping[str, Effect]
    approvals: frozenset[str]
    on_approval: Ask | None
    approval_expires_in: dt.timedelta | float | None
    streaming: bool
    on_text: Callable[[str], Any] | None


# Set around the runner's run by `run`; cleared inside each journaled call (a
# tool's own code is not the workflow's).
CURRENT: ContextVar[Session | None] = ContextVar("stead_google_adk_session", default=None)
# The operation of the effect a tool runs in (`stead.contrib.google_adk.operation()`).
OPERATION: ContextVar[stead.Operation | None] = ContextVar("stead_google_adk_operation",
                                                           default=None)


@contextmanager
def bound(session: Session | None) -> Iterator[None]:
    token = CURRENT.set(session)
    try:
        yield
    finally:
        CURRENT.reset(token)
