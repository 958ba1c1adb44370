"""`stead.waiting.first`: the first of several waits, in few turns of the loop."""

from __future__ import annotations

import asyncio
import gc

import pytest

from stead import waiting


async def test_it_returns_when_the_first_ends_and_cancels_the_others() -> None:
    told = asyncio.Event()
    slow = asyncio.ensure_future(asyncio.sleep(60))

    async def tell() -> None:
        await asyncio.sleep(0.01)
        told.set()

    teller = asyncio.ensure_future(tell())
    await asyncio.wait_for(waiting.first(told.wait(), slow), 5)
    assert told.is_set()
    await asyncio.sleep(0)  # the loser ends at its own next turn
    assert slow.cancelled()
    await teller


async def test_it_returns_after_the_timeout_when_nothing_ends() -> None:
    never = asyncio.Event()
    loop = asyncio.get_running_loop()
    began = loop.time()
    await waiting.first(never.wait(), timeout=0.05)
    assert 0.04 <= loop.time() - began < 5
    assert not waiting._ENDING or all(t.cancelling() for t in waiting._ENDING)


async def test_an_awaitable_that_raises_ends_the_wait_without_raising() -> None:
    async def fails() -> None:
        raise RuntimeError("the store went away")

    await asyncio.wait_for(waiting.first(fails(), asyncio.sleep(60)), 5)


async def test_the_waiter_is_cancelled_with_its_waits() -> None:
    left = asyncio.ensure_future(asyncio.sleep(60))
    waiter = asyncio.ensure_future(waiting.first(left))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.sleep(0)
    assert left.cancelled()


async def test_the_waiter_goes_on_within_two_turns_of_the_loop() -> None:
    # A worker's idle wait: another task keeps the loop turning (as a wave of
    # runs does); the waiter goes on within two of its turns once the thing
    # it waits for happens. `asyncio.wait` and a gather of the losers take
    # five (counted the same way: 5).
    told = asyncio.Event()
    turns = 0
    told_at: int | None = None

    async def spin() -> None:
        nonlocal turns, told_at
        while True:
            await asyncio.sleep(0)
            turns += 1
            if turns == 5:
                told_at = turns
                told.set()

    spinner = asyncio.ensure_future(spin())
    await waiting.first(told.wait(), asyncio.sleep(60))
    went_on = turns
    spinner.cancel()
    assert told_at is not None and went_on - told_at <= 2


async def test_losers_left_ending_are_not_garbage_collected_midway() -> None:
    ended: list[str] = []

    async def loser() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            ended.append("loser")

    await waiting.first(asyncio.sleep(0), loser())
    gc.collect()  # held by `_ENDING`, not only by the loop's weak set
    for _ in range(3):
        await asyncio.sleep(0)
    assert ended == ["loser"]
    assert not waiting._ENDING
