"""Time is passed in, never monkeypatched: the store and runs take a `Clock`.

It is business time (timers, deadlines, expiries, row times). Leases are
judged by the database's own clock instead, so a machine whose clock is off
cannot take a live lease; a test that expires leases by moving a `FakeClock`
passes it as the lease clock too: `open_store(url, clock=c, lease_clock=c)`."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (wall clock, comparable across processes)."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds
