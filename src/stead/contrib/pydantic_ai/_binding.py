"""The stead run a pydantic-ai agent runs in, for the durability capability to find."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import stead
from stead.contrib._scope import Scope


@dataclasses.dataclass(frozen=True)
class Binding:
    run: stead.Run
    scope: Scope


# Set by `stead.contrib.pydantic_ai.run` around the agent's run, and cleared
# inside each journaled step: code in a step is not the run's own code.
CURRENT: ContextVar[Binding | None] = ContextVar("stead_pydantic_ai_binding", default=None)


@contextmanager
def bound(binding: Binding | None) -> Iterator[None]:
    token = CURRENT.set(binding)
    try:
        yield
    finally:
        CURRENT.reset(token)


def current(what: str) -> Binding:
    binding = CURRENT.get()
    if binding is None:
        raise stead.SteadError(
            f"{what} needs the stead run: run the agent with "
            "stead.contrib.pydantic_ai.run(run, agent, ...)")
    return binding
