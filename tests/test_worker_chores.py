"""A worker's side tasks end when it stops, even when a library they are
inside loses a cancellation (`asyncio.wait_for` on Python 3.11 can)."""

from __future__ import annotations

import asyncio

from stead.worker import chores


async def test_a_chore_that_loses_a_cancellation_is_cancelled_again_until_it_ends() -> None:
    lost = 0

    async def heartbeats() -> None:
        nonlocal lost
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if lost < 2:  # as a wait_for returning a result that came at the same time
                    lost += 1
                    continue
                raise

    task = asyncio.create_task(heartbeats())
    await asyncio.sleep(0.02)
    await asyncio.wait_for(chores.end(task), 5)
    assert task.cancelled() and lost == 2


async def test_ending_chores_raises_nothing_of_theirs_and_takes_ended_ones_as_they_are() -> None:
    async def fails() -> None:
        raise RuntimeError("a heartbeat's own failure")

    failed = asyncio.create_task(fails())
    done = asyncio.create_task(asyncio.sleep(0))
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(asyncio.sleep(60))
    await chores.end(failed, done, waiting)
    assert failed.done() and done.done() and waiting.cancelled()
