"""Failed attempts counted per source address, in memory and bounded.

A source that fails `limit` times within a window of `window` seconds (a
wrong login token; a webhook call that authenticates neither way) is refused
until that window ends, without anything being read or checked. It bounds
guessing from one address, and it is per address, so the guesses of one
source never refuse another: the legitimate approver is not locked out by
someone else's junk.

At most `sources` addresses are tracked: past that the oldest window is
dropped (an attacker with that many addresses gains as many fresh windows;
memory stays bounded). Windows live in this process only, as the sessions do.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable

from starlette.requests import Request

LOGIN = (5, 60.0)  # failures, per seconds
WEBHOOK = (20, 60.0)
SOURCES = 10_000


def source(request: Request) -> str:
    """The address a request came from (as the server saw it, or as the
    proxy it trusts says)."""
    return request.client.host if request.client is not None else "unknown"


@dataclasses.dataclass
class _Window:
    ends_at: float
    failures: int


class Throttle:
    def __init__(self, limit: int, window: float, *, sources: int = SOURCES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 1 or window <= 0 or sources < 1:
            raise ValueError("a throttle takes at least one failure, in a window of some "
                             "seconds, from at least one source")
        self.limit = limit
        self.window = window
        self.sources = sources
        self.clock = clock
        # Oldest window first: a window is added once and never moved, so
        # this is also the order in which they end.
        self._windows: collections.OrderedDict[str, _Window] = collections.OrderedDict()

    def _current(self, source: str, now: float) -> _Window | None:
        found = self._windows.get(source)
        if found is not None and found.ends_at <= now:
            del self._windows[source]
            return None
        return found

    def refused_for(self, source: str) -> float:
        """Seconds until `source` may try again (0: it may now)."""
        now = self.clock()
        found = self._current(source, now)
        if found is None or found.failures < self.limit:
            return 0.0
        return found.ends_at - now

    def failed(self, source: str) -> None:
        """Count one failed attempt from `source`."""
        now = self.clock()
        found = self._current(source, now)
        if found is not None:
            found.failures += 1
            return
        while self._windows:  # drop the windows that ended, oldest first
            first = next(iter(self._windows.values()))
            if first.ends_at > now and len(self._windows) < self.sources:
                break
            self._windows.popitem(last=False)
        self._windows[source] = _Window(now + self.window, 1)

    def __len__(self) -> int:
        return len(self._windows)
