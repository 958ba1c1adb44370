"""A journaled call that streams while it runs live: the call (a `run.step`
or `run.effect`) runs as a task, and what it puts on the relay while it runs
is yielded by `events` as it arrives, followed by the call's result."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
_DONE = object()


@dataclasses.dataclass(frozen=True)
class Finished(Generic[T]):
    value: T


class Relay:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue()

    def put(self, event: Any) -> None:
        self._queue.put_nowait(event)

    def start(self, call: Awaitable[T]) -> asyncio.Future[T]:
        """Run `call` as a task made now, in the caller's context: it keeps the
        journal address the caller set (an async generator must not hold a
        context variable set across its yields)."""

        async def running() -> T:
            try:
                return await call
            finally:
                self._queue.put_nowait(_DONE)

        return asyncio.ensure_future(running())

    async def events(self, task: asyncio.Future[T]) -> AsyncIterator[Any]:
        """The events put while `task` runs, then `Finished(its result)`."""
        try:
            while (event := await self._queue.get()) is not _DONE:
                yield event
            yield Finished(await task)
        finally:
            if not task.done():
                task.cancel()
