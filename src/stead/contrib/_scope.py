"""Journal addresses keyed by what an SDK names, not by when it runs.

An SDK creates tasks of its own (for parallel tool calls, guardrails,
timeouts), and how many depends on its version and on timing. The calls an
integration journals must not depend on that, so each one is made under a
branch named by a key the SDK hands over and that replays identically: a
tool-call id (recorded in the journaled model answer that asked for the call),
or the position of a model request in the agent's own sequence. The SDK itself
runs under one child branch of the workflow, so whatever tasks it creates never
shift the workflow's own numbering."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any, TypeVar

from stead import addresses

T = TypeVar("T")

_PLAIN = re.compile(r"[A-Za-z0-9_-]{1,64}")


def safe_key(text: str) -> str:
    """`text` as a piece of an address: kept as it is when plain, else a digest
    (an address uses `.` as its separator)."""
    if _PLAIN.fullmatch(text):
        return text
    return "h" + hashlib.sha256(text.encode()).hexdigest()[:24]


def json_digest(value: Any) -> str:
    """A short, stable digest of a JSON value (keys sorted)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class Scope:
    """The branch an integration's calls are journaled under, for one agent run."""

    def __init__(self) -> None:
        parent = addresses.current.get()
        if parent is None:
            raise RuntimeError(
                "a stead integration runs in a workflow's own code (called with the workflow's "
                "`run`), not from inside a step or an effect")
        self._branch = parent.child()
        self._counts: Counter[str] = Counter()

    def next(self, name: str) -> str:
        """`name` and how many times it was asked for before, as a key: for calls
        an SDK makes one after the other (model requests, discovery)."""
        index = self._counts[name]
        self._counts[name] += 1
        return f"{safe_key(name)}#{index}"

    @contextmanager
    def at(self, key: str) -> Iterator[None]:
        """Journal the calls made inside under the branch named `key`."""
        token = addresses.current.set(addresses.Branch(f"{self._branch.path}{key}."))
        try:
            yield
        finally:
            addresses.current.reset(token)

    @contextmanager
    def sdk(self) -> Iterator[None]:
        """Run the SDK's own code under this scope's branch: the tasks it
        creates are numbered under it, not under the workflow's branch."""
        token = addresses.current.set(self._branch)
        try:
            yield
        finally:
            addresses.current.reset(token)


async def each_step_under(events: AsyncIterator[T],
                          *contexts: Callable[[], AbstractContextManager[Any]]
                          ) -> AsyncIterator[T]:
    """`events`, each step of it taken inside `contexts` (entered afresh for
    each step): an async generator runs in its consumer's context, so what an
    SDK's code must see (the session bound, the scope's branch) is set around
    each step, not once around the loop."""
    while True:
        with ExitStack() as stack:
            for context in contexts:
                stack.enter_context(context())
            try:
                event = await anext(events)
            except StopAsyncIteration:
                return
        yield event
