"""Fair claims across tenants: weighted fair sharing of a worker's free slots.

Each claim reads, for every tenant with runs that could be claimed, how many
of its runs are leased now (`active`), how many are ready (up to the slots
free) and how many it started within its rate's period (`recent`). `shares`
then gives the free slots one at a time to the tenant whose leased runs per
unit of weight, counting the slots given so far, are fewest: water-filling,
so that over the fleet each tenant with ready work holds a share of the runs
in flight in proportion to its weight, whatever the size of another tenant's
backlog. A tenant's own limits (`Limits.concurrency`, `Limits.rate`) cap what
it is given. Ties go round: `turn` moves the first tenant on at each claim.
A worker may keep its last slot (`keep`) for tenants with no run in flight or
fewer per weight than another tenant, so that a newcomer beside a burst is
claimed as soon as it starts instead of when the next run of the burst ends.

Pure: no I/O; `stead.store` calls it inside the claim's transaction.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Mapping, Sequence

from stead import bounds, errors
from stead.tenants import check

MAX_WEIGHT = 10_000


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """One tenant's weight (its share of the workers, relative to the other
    tenants with ready work) and limits, each None for none: `concurrency`
    runs leased at once across every worker of the database, `rate` runs
    started per `period` seconds."""

    weight: int = 1
    concurrency: int | None = None
    rate: int | None = None
    period: float = 0.0

    def room(self, active: int, recent: int, limit: int) -> int:
        """How many more runs the tenant may lease now, at most `limit`."""
        room = limit
        if self.concurrency is not None:
            room = min(room, self.concurrency - active)
        if self.rate is not None:
            room = min(room, self.rate - recent)
        return max(room, 0)

    def since(self, now: float) -> float | None:
        """Where the rate's window starts (None: no rate, nothing to count)."""
        return now - self.period if self.rate is not None else None

    @property
    def limited(self) -> bool:
        return self.concurrency is not None or self.rate is not None


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    """The weights and limits of every tenant: `named` ones, and `default`
    for the rest (runs of no tenant count as one tenant, '')."""

    default: Limits = Limits()
    named: Mapping[str, Limits] = dataclasses.field(default_factory=dict)

    def of(self, tenant: str) -> Limits:
        return self.named.get(tenant, self.default)

    @property
    def limited(self) -> bool:
        """Whether some tenant has a limit (then every claim counts)."""
        return self.default.limited or any(x.limited for x in self.named.values())


@dataclasses.dataclass(frozen=True, slots=True)
class Load:
    """What a claim reads of one tenant (see the module's docstring)."""

    tenant: str
    active: int
    ready: int
    recent: int = 0


def limits(*, weight: int = 1, concurrency: int | None = None,
           rate: tuple[int, float] | None = None, what: str = "a tenant") -> Limits:
    """Checked `Limits`; `rate=(100, 60.0)` is 100 starts a minute (the
    period in seconds, already parsed)."""
    bounds.integer(weight, f"{what}: weight", least=1, most=MAX_WEIGHT)
    if concurrency is not None:
        bounds.integer(concurrency, f"{what}: concurrency", least=1, most=bounds.MAX_INT32)
    count, period = None, 0.0
    if rate is not None:
        count, period = rate
        bounds.integer(count, f"{what}: rate", least=1, most=bounds.MAX_INT32)
    return Limits(weight, concurrency, count, period)


def with_tenant(policy: Policy, tenant: str, made: Limits) -> Policy:
    """`policy` with `tenant`'s own limits (`InvalidTenant` for a bad id)."""
    check(tenant, "a tenant's name")
    if tenant in policy.named:
        raise errors.InvalidTenant(f"tenant {tenant!r} is declared twice")
    return Policy(policy.default, {**policy.named, tenant: made})


def shares(free: int, loads: Sequence[Load], policy: Policy, turn: int = 0,
           keep: int = 0) -> dict[str, int]:
    """How many runs each tenant's claim takes, out of `free` slots: water-
    filling by (active + given) / weight, never past a tenant's ready runs nor
    its limits' room (see the module's docstring). The last `keep` slots go
    only to tenants with no run in flight (a tenant given a slot by this
    claim has one) or that would still hold no more runs per weight than
    another tenant (`_kept_slot_to`): a tenant that starts a run while others'
    backlogs fill the workers finds a slot at once. Tenants given none are
    left out.

    It runs inside the claim's transaction, over up to a thousand tenants:
    the shared slots come off a heap (a slot costs log n, not n), and each
    kept slot is one pass over the tenants (not one per tenant)."""
    if free <= 0 or not loads:
        return {}
    start = turn % len(loads)
    order = [*loads[start:], *loads[:start]]
    room: dict[str, int] = {}
    active: dict[str, int] = {}
    weight: dict[str, int] = {}
    for x in order:
        limits = policy.of(x.tenant)
        room[x.tenant] = min(x.ready, limits.room(x.active, x.recent, free))
        active[x.tenant] = x.active
        weight[x.tenant] = limits.weight
    given = dict.fromkeys(room, 0)
    # (runs held per weight, place in the turn's order, tenant) of each
    # tenant with room left: the smallest is the fairest to give a slot.
    heap = [(active[t] / weight[t], rank, t) for rank, t in enumerate(room) if room[t] > 0]
    heapq.heapify(heap)
    shared = 0  # slots given that any tenant could take
    while shared < free - keep:
        if not heap:
            return _given(given)
        _, rank, best = heapq.heappop(heap)
        given[best] += 1
        shared += 1
        if given[best] < room[best]:
            heapq.heappush(heap, ((active[best] + given[best]) / weight[best], rank, best))
    for _ in range(free - shared):
        kept_to = _kept_slot_to(room, active, given, weight)
        if kept_to is None:
            break
        given[kept_to] += 1
    return _given(given)


def _given(given: Mapping[str, int]) -> dict[str, int]:
    return {t: n for t, n in given.items() if n > 0}


def _kept_slot_to(room: Mapping[str, int], active: Mapping[str, int],
                  given: Mapping[str, int], weight: Mapping[str, int]) -> str | None:
    """The fairest tenant with room that may take a kept slot (None: none):
    one with nothing in flight, counting what this claim gave it, or that
    taking the slot leaves with no more runs per weight than another tenant
    holds. A backlog whose runs all ended just before the claim does not take
    the slot a newcomer needs, and a tenant far below its share (its runs
    started one by one while a burst filled the slots) is not made to wait
    for the burst's runs to end. (The most another tenant holds may be read
    as the most any tenant holds: a tenant at the top, one more run, is past
    it either way.)"""
    level = {t: (active[t] + given[t]) / weight[t] for t in active}
    most = max(level.values())
    best, best_key = None, (0.0, 0)
    for rank, t in enumerate(room):
        held = active[t] + given[t]
        if given[t] >= room[t] or (held != 0 and (held + 1) / weight[t] > most):
            continue
        if best is None or (level[t], rank) < best_key:
            best, best_key = t, (level[t], rank)
    return best
