"""The worker's side tasks (heartbeats, the drain watch): ended for sure.

A cancelled task whose code is inside a library's `asyncio.wait_for` can
lose the cancellation on Python 3.11: `wait_for` returns the result that
arrived at the same moment instead of raising, and the task goes on (the
connection pool's wait for a connection is such a call). A worker that
cancelled its heartbeat once and then waited for it could wait forever, so
it cancels again until each task has ended."""

from __future__ import annotations

import asyncio
from typing import Any

# How long to wait for the tasks to end before cancelling them again.
_AGAIN = 0.1


async def end(*tasks: asyncio.Task[Any]) -> None:
    """Cancel `tasks` and wait until each has ended, cancelling again while
    any goes on; what they raise is theirs (it is not raised here)."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _done, pending = await asyncio.wait(pending, timeout=_AGAIN)
    for task in tasks:
        if not task.cancelled():
            task.exception()  # retrieved: not logged as never retrieved
