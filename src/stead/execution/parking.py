"""`Parking`: the attempt's live work and its parked branches. A branch
that waits blocks; when every branch is parked and nothing is in flight, the
run suspends (its lease released, no worker held) until it is woken."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator

from stead import addresses, errors, logs
from stead.execution.exits import Frontier
from stead.execution.fence import Blocker
from stead.execution.writes import Writes

log = logging.getLogger("stead.run")


class Parking(Writes):
    """What is in flight, what is parked, and the suspension."""

    async def outlive_previous_holder(self, what: str) -> bool:
        """If the run's previous holder may still be alive and sending (taken
        for dead by its presence alone, its lease not yet run out), wait
        until its lease would have ended; whether it waited. `what`: the
        call that waits, for the log."""
        until = self.previous_holder_until
        if until is None:
            return False
        self.previous_holder_until = None
        left = until - time.monotonic()
        if left <= 0:
            return False
        log.warning("run %s: %s; its previous holder was taken for dead while cut off "
                    "from the database and may still be sending: waiting %.1f s, until its "
                    "lease would have ended", self.fence.run_id, what, left,
                    extra={"run_id": self.fence.run_id})
        with self.busy():
            await asyncio.sleep(left)
        return True

    def busy(self) -> contextlib.AbstractContextManager[None]:
        """Mark live work in flight (user code, a store round trip): the run
        must not suspend under it."""
        return _Busy(self)

    @contextlib.contextmanager
    def sending(self, *, in_thread: bool) -> Iterator[None]:
        """Mark an effect being sent: live work, as in `busy`. A sync effect
        function runs `in_thread`, which no one can stop: the worker waits for
        it past its grace period, to journal its outcome."""
        self._inflight += 1
        self._sending_in_thread += in_thread
        try:
            yield
        finally:
            self._sending_in_thread -= in_thread
            self._idle()

    def _idle(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            if self._blocked:
                self._schedule_settle()
            if self._quiet is not None:
                self._quiet.set()

    async def calls_settled(self) -> None:
        """Return once nothing of the run is in flight (no step, model call or
        effect running). After a failed write the run is given up only then:
        released sooner, a step still running in a thread here would run
        again on the next holder while this worker lives."""
        while self._inflight:
            self._quiet = asyncio.Event()
            await self._quiet.wait()

    async def sleep_until(self, at: float) -> None:
        """Wait until the wall-clock time `at`; a long wait suspends the run."""
        delay = at - self.clock.now()
        if delay <= 0:
            return
        if self.dry:
            raise Frontier()
        if delay <= self._suspend_after:
            await asyncio.sleep(delay)
            return
        while self.clock.now() < at:
            self.check_live()
            await self.block(wake_at=at, wait_id=None)

    async def block(self, *, wake_at: float | None, wait_id: str | None,
                    child_id: str | None = None) -> None:
        """Park this branch until something may have changed: its wake time, a
        periodic re-check, a drain, or a failed attempt to suspend (an event
        arrived). The caller re-checks its condition and blocks again if need be.
        When every branch is parked and nothing is in flight, the run suspends:
        its lease is released and it holds no worker until it is woken."""
        if self.dry:
            raise Frontier()
        loop = asyncio.get_running_loop()
        blocker = Blocker(wake_at, wait_id, loop.create_future(), child_id)
        self._blocked.add(blocker)
        until = self.clock.now() + self._recheck_every
        if wake_at is not None:
            until = min(until, wake_at)
        if self.deadline is not None:
            until = min(until, self.deadline)
        timer = loop.call_later(max(0.0, until - self.clock.now()), blocker.wake)
        self._schedule_settle()
        try:
            await blocker.future
        finally:
            timer.cancel()
            self._blocked.discard(blocker)

    def _schedule_settle(self) -> None:
        if self._settling is None or self._settling.done():
            # The runtime's task, not a branch of the workflow (see `addresses`).
            with addresses.outside_branches():
                self._settling = asyncio.get_running_loop().create_task(self._settle())

    async def _settle(self) -> None:
        # Let every branch run up to its next await before judging quiescence.
        for _ in range(5):
            await asyncio.sleep(0)
        if self._inflight or not self._blocked or self._suspended or self._draining:
            return
        if self._lost is not None or self._incompatible is not None:
            return
        times = [b.wake_at for b in self._blocked if b.wake_at is not None]
        if self.deadline is not None:
            times.append(self.deadline)  # a waiting run wakes to fail at its deadline
        wake_at = min(times) if times else None
        if wake_at is not None and wake_at - self.clock.now() <= self._suspend_after:
            return  # a short wait: cheaper to sleep here than to park and replay
        wait_ids = [b.wait_id for b in self._blocked if b.wait_id is not None]
        children = [b.child_id for b in self._blocked if b.child_id is not None]
        self._ending = True
        try:
            await self.write((), lambda batch, resume: self.store.suspend(
                self.fence, batch, resume, wake_at, wait_ids, children,
            ))
        except (errors.WaitNotOpen, errors.CancelRequested) as exc:
            self._ending = False  # not suspended: the run goes on
            if isinstance(exc, errors.CancelRequested):
                self._cancel_requested = True
            for blocker in list(self._blocked):
                blocker.wake()  # an event arrived or a child ended meanwhile: go and read it
            return
        except errors.SteadError as exc:
            self._ending = False
            log.warning("run %s could not suspend: %s", self.fence.run_id, exc)
            return
        self._suspended = True
        log.info("run %s suspended until %s", self.fence.run_id,
                 "an event" if wake_at is None else f"{logs.iso(wake_at)} or an event")
        if self._body is not None:
            self._body.cancel()


class _Busy:
    # A class, not a generator: entered around every step's call, where
    # `contextmanager`'s generator costs a few µs each time.
    __slots__ = ("_parking",)

    def __init__(self, parking: Parking) -> None:
        self._parking = parking

    def __enter__(self) -> None:
        self._parking._inflight += 1

    def __exit__(self, *exc: object) -> None:
        self._parking._idle()
