"""Failed attempts counted per source address, in memory and bounded.

A source that fails `limit` times within a window of `window` seconds (a
wrong login token; a webhook call that authenticates neither way) is refused
until that window ends: a webhook call without anything being read or
checked, a login only if its token is wrong too (the dashboard never refuses
the right token because of failures before it). It is per address, so the
guesses of one source never refuse another: the legitimate approver is not
locked out by someone else's junk.

The address is the client's (`source`): the peer's, or, from a trusted proxy
(the dashboard's `trusted_proxies`, `stead ui --trusted-proxy`), the client
the proxy names in `X-Forwarded-For`; behind a proxy every request comes
from its address, and one client's failures would otherwise count for all.

At most `sources` addresses are tracked: past that the oldest window is
dropped (an attacker with that many addresses gains as many fresh windows;
memory stays bounded). Windows live in this process only, as the sessions do.
"""

from __future__ import annotations

import collections
import dataclasses
import ipaddress
import time
from collections.abc import Callable, Collection

from starlette.requests import Request

LOGIN = (5, 60.0)  # failures, per seconds
WEBHOOK = (20, 60.0)
SOURCES = 10_000


def source(request: Request, proxies: Collection[str] = ()) -> str:
    """The address a request came from: the peer's, or, when the peer is one
    of the trusted `proxies`, the client's its `X-Forwarded-For` names. That
    is the last address in the header that is no trusted proxy: each proxy
    appends the address it was reached from, while whatever came before the
    first one is what the client wrote, believed by no one."""
    peer = request.client.host if request.client is not None else "unknown"
    if peer not in proxies:
        return peer
    chain = [a.strip() for line in request.headers.getlist("x-forwarded-for")
             for a in line.split(",")]
    for address in reversed(chain):
        if address not in proxies:
            return address if _address(address) else peer
    return peer


def _address(text: str) -> bool:
    """Whether `text` is an IP address (what a proxy appends), not junk."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


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
