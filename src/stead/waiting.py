"""Waiting for the first of several things on a busy event loop, in as few of
its turns as can be.

Each hop through the event loop's ready queue waits behind everything else
ready then: on a worker driving a wave of quick runs, one turn of the loop
is a millisecond or more. `asyncio.wait` and a `gather` of the cancelled
losers take five turns from the first thing happening to the waiter going
on (the winner's done callback, the waiter's wake-up, each loser's
cancellation, the gather's callback, the wake-up again); nested twice, as a
worker's idle wait for news of work was, a newcomer's run waited a dozen
turns for its claim. `first` takes two (the winner's last step, the
waiter's wake-up) and leaves the losers to end at their own next turn,
unawaited.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterator, Sequence

# Losers cancelled by `first`, held until they end (the event loop keeps only
# weak references to its tasks).
_ENDING: set[asyncio.Task[None]] = set()


class Bell:
    """A flag, as `asyncio.Event`, that also calls its listeners as it is set:
    a `first` listening to it goes on at its waiter's next turn of the loop,
    however many tasks lie between the one that sets it and the waiter. Set
    and cleared on the event loop (another thread posts `set` to it)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._listeners: list[Callable[[], None]] = []

    def set(self) -> None:
        if self._event.is_set():
            return
        self._event.set()
        for listener in tuple(self._listeners):
            listener()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()

    @contextlib.contextmanager
    def listening(self, listener: Callable[[], None] | None) -> Iterator[None]:
        """Call `listener` (at once, on the loop; it must not raise) when the
        bell is set while the block runs (None: nothing to call)."""
        if listener is None:
            yield
            return
        self._listeners.append(listener)
        try:
            yield
        finally:
            self._listeners.remove(listener)


async def first(*awaitables: Awaitable[object], bells: Sequence[Bell] = (),
                timeout: float | None = None) -> None:
    """Return once any of `awaitables` ends (returns or raises: its outcome is
    not the waiter's, as with `asyncio.wait`), any of `bells` is set (at once
    if one is) or `timeout` seconds pass; the others are cancelled (a
    coroutine not begun is closed)."""
    if any(bell.is_set() for bell in bells):
        for awaitable in awaitables:
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            elif isinstance(awaitable, asyncio.Future):
                awaitable.cancel()
        return
    loop = asyncio.get_running_loop()
    over: asyncio.Future[None] = loop.create_future()

    def finish() -> None:
        if not over.done():
            over.set_result(None)

    async def watch(awaitable: Awaitable[object]) -> None:
        # Its end ends the wait within its own step: a done callback would
        # take a turn of the loop more.
        try:
            with contextlib.suppress(Exception):
                await awaitable
        finally:
            finish()

    # Each task takes its first step (and so begins its wait) before this
    # coroutine can resume, even to be cancelled: none is left unawaited.
    tasks = [loop.create_task(watch(a)) for a in awaitables]
    timer = None if timeout is None else loop.call_later(timeout, finish)
    try:
        with contextlib.ExitStack() as listening:
            for bell in bells:
                listening.enter_context(bell.listening(finish))
            await over
    finally:
        if timer is not None:
            timer.cancel()
        for task in tasks:
            if not task.done():
                task.cancel()
                _ENDING.add(task)
                task.add_done_callback(_ENDING.discard)
