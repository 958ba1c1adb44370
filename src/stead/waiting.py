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
from collections.abc import Awaitable

# Losers cancelled by `first`, held until they end (the event loop keeps only
# weak references to its tasks).
_ENDING: set[asyncio.Task[None]] = set()


async def first(*awaitables: Awaitable[object], timeout: float | None = None) -> None:
    """Return once any of `awaitables` ends (returns or raises: its outcome is
    not the waiter's, as with `asyncio.wait`) or `timeout` seconds pass; the
    others are cancelled."""
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
        await over
    finally:
        if timer is not None:
            timer.cancel()
        for task in tasks:
            if not task.done():
                task.cancel()
                _ENDING.add(task)
                task.add_done_callback(_ENDING.discard)
