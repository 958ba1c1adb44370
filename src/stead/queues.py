"""Queues: how many runs of a queue may execute at once (across every worker
of the database, and on one worker) and how many may start per period.

A `Queue` is declared in code (`app.queue(...)`); the limits are not stored.
Each claim of a queue counts, inside its transaction and under the queue's
lock, the queue's runs leased now and those first claimed within the rate's
period, and leases no more than `Queue.room` leaves: the counts it read stay
true until its own leases commit, whichever worker claims next.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re

from stead import bounds, tenants

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_PERIOD = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

Period = str | float | int | dt.timedelta


@dataclasses.dataclass(frozen=True, slots=True)
class Queue:
    """A queue's limits, each None for none: `concurrency` runs leased at
    once across all workers, `per_worker` on any one worker, `rate` runs
    started per `period` seconds. With `priority`, runs may be started with a
    priority (lower is claimed first; 0 by default); without it, the queue is
    first in, first out. With `tenant`, it holds that tenant's runs alone: a
    run started in it without a tenant serves that one."""

    name: str
    concurrency: int | None = None
    per_worker: int | None = None
    rate: int | None = None
    period: float = 0.0
    priority: bool = False
    tenant: str | None = None

    def room(self, active: int, mine: int, recent: int, limit: int) -> int:
        """How many runs a claim may lease now: at most `limit` (the worker's
        free slots), given `active` runs of the queue leased, `mine` of them
        by this worker, `recent` started within the period."""
        room = limit
        if self.concurrency is not None:
            room = min(room, self.concurrency - active)
        if self.per_worker is not None:
            room = min(room, self.per_worker - mine)
        if self.rate is not None:
            room = min(room, self.rate - recent)
        return max(room, 0)

    def since(self, now: float) -> float:
        """Where the rate's window starts (the runs started after it count)."""
        return now - self.period if self.rate is not None else now


def is_name(text: object) -> bool:
    """Whether `text` may name a queue: an identifier-like word."""
    return isinstance(text, str) and _NAME.match(text) is not None


def define(name: str, *, concurrency: int | None = None, per_worker: int | None = None,
           rate: tuple[int, Period] | None = None, priority: bool = False,
           tenant: str | None = None) -> Queue:
    """A checked `Queue`: `rate=(100, "1m")` is 100 starts a minute (a period
    is seconds, a `timedelta`, or a number with ms, s, m, h or d)."""
    if not is_name(name):
        raise ValueError(f"queue name {name!r} must be an identifier-like word")
    for what, value in (("concurrency", concurrency), ("per_worker", per_worker)):
        _positive(name, what, value)
    limit, period = None, 0.0
    if rate is not None:
        if not isinstance(rate, tuple) or len(rate) != 2:
            raise ValueError(f"queue {name!r}: rate= takes (count, period), e.g. (100, '1m')")
        limit, period = rate[0], parse_period(rate[1])
        _positive(name, "rate", limit)
    tenants.check(tenant, f"queue {name!r}: tenant=")
    return Queue(name, concurrency, per_worker, limit, period, bool(priority), tenant)


def parse_period(value: Period) -> float:
    """Seconds in `value`: a number, a `timedelta`, or text like 30s, 1m, 2h."""
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise ValueError(f"a period is seconds or text like '1m', not {value!r}")
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (m := _PERIOD.match(value)):
        seconds = float(m.group(1)) * _UNIT[m.group(2)]
    else:
        raise ValueError(f"a period is seconds, a timedelta or text like '30s', '1m', '2h'; "
                         f"not {value!r}")
    return bounds.seconds(seconds, f"the period {value!r}")


def _positive(queue: str, what: str, value: object) -> None:
    if value is not None:
        bounds.integer(value, f"queue {queue!r}: {what}", least=1, most=bounds.MAX_INT32)
