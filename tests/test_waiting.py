"""`stead.waiting.first`: the first of several waits, in few turns of the loop."""

from __future__ import annotations

import asyncio
import gc
import inspect
import threading
from collections.abc import Awaitable, Callable

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


async def _turns_until_the_waiter_goes_on(wait: Callable[[], Awaitable[None]],
                                          tell: Callable[[], None]) -> int:
    """Turns of the loop (another task keeps it turning, as a wave of runs
    does) from `tell()` to the waiter's going on."""
    turns = 0
    told_at: int | None = None

    async def spin() -> None:
        nonlocal turns, told_at
        while True:
            await asyncio.sleep(0)
            turns += 1
            if turns == 5:
                told_at = turns
                tell()

    spinner = asyncio.ensure_future(spin())
    await wait()
    went_on = turns
    spinner.cancel()
    assert told_at is not None
    return went_on - told_at


async def test_the_waiter_goes_on_within_two_turns_of_the_loop() -> None:
    # A worker's idle wait: another task keeps the loop turning (as a wave of
    # runs does); the waiter goes on within two of its turns once the thing
    # it waits for happens. `asyncio.wait` and a gather of the losers take
    # five (counted the same way: 5).
    told = asyncio.Event()

    async def wait() -> None:
        await waiting.first(told.wait(), asyncio.sleep(60))

    assert await _turns_until_the_waiter_goes_on(wait, told.set) <= 2


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


async def test_a_bell_ends_the_wait_at_the_waiters_next_turn() -> None:
    # An `asyncio.Event` awaited through `first` takes two turns (its waiter's
    # task, then the waiter); a bell takes one, however deep the task that
    # sets it.
    bell = waiting.Bell()

    async def wait() -> None:
        await waiting.first(asyncio.sleep(60), bells=(bell,))

    assert await _turns_until_the_waiter_goes_on(wait, bell.set) <= 1
    assert not bell._listeners  # the wait no longer listens


async def test_a_bell_set_before_the_wait_returns_without_a_turn_and_closes_the_waits() -> None:
    bell = waiting.Bell()
    bell.set()
    pending = asyncio.sleep(60)
    task = asyncio.ensure_future(asyncio.sleep(60))
    loop = asyncio.get_running_loop()
    turned = asyncio.Event()
    loop.call_soon(turned.set)
    await waiting.first(pending, task, bells=(bell,))
    assert not turned.is_set()  # no turn of the loop taken
    assert inspect.getcoroutinestate(pending) == inspect.CORO_CLOSED  # never "not awaited"
    await asyncio.sleep(0)
    assert task.cancelled()


async def test_a_bell_calls_its_listeners_once_a_setting_and_only_while_they_listen() -> None:
    bell = waiting.Bell()
    heard: list[str] = []
    with bell.listening(lambda: heard.append("a")):
        bell.set()
        bell.set()  # already set: nothing new to hear
        assert heard == ["a"]
        bell.clear()
        assert not bell.is_set()
        bell.set()
        assert heard == ["a", "a"]
    bell.clear()
    bell.set()
    assert heard == ["a", "a"]
    await asyncio.wait_for(bell.wait(), 1)


async def test_a_bell_set_from_another_thread_through_the_loop_ends_the_wait() -> None:
    bell = waiting.Bell()
    loop = asyncio.get_running_loop()
    setter = threading.Timer(0.02, loop.call_soon_threadsafe, (bell.set,))
    setter.start()
    try:
        await asyncio.wait_for(waiting.first(asyncio.sleep(60), bells=(bell,)), 5)
    finally:
        setter.join()
    assert bell.is_set()
