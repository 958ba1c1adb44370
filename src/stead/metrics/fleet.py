"""The gauges a scrape reads from the store: runs by status, queues, waits,
stranded runs and the live workers serving each workflow.

They are not kept up to date on the step path: `read()` asks the store at
scrape time, in a few indexed aggregates bounded by the live runs (and at
most `LIMIT` stranded runs and worker heartbeats), and `Fleet` hands the
reading to the OpenTelemetry observable gauges it registers. A scrape whose
read fails reports `stead_store_up 0` and the counters, without the gauges.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from stead.records import HostRole, RunStatus
from stead.records.fleet import Gauges

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

    from stead.store.base import Store

log = logging.getLogger("stead.metrics")

LIMIT = 1000  # stranded runs and heartbeats read per scrape, at most
SOON = 3600.0  # a wait expiring within this many seconds counts as expiring


@dataclasses.dataclass(frozen=True)
class Reading:
    """The store as one scrape found it; `now` is on the store's clock."""

    now: float
    gauges: Gauges
    stranded: dict[tuple[str, int], int]  # (workflow, version) -> runs
    runnable: dict[tuple[str, int], int]  # (workflow, version) -> runs claimable now
    serving: dict[tuple[str, int], int]  # (workflow, version) -> live workers hosting it
    workers: int  # live workers, by their heartbeats


async def read(store: Store, *, grace: float) -> Reading:
    """Read the gauges; a run is stranded when no worker served its version for `grace`."""
    now = store.clock.now()
    gauges = await store.gauges(SOON)
    stranded: dict[tuple[str, int], int] = {}
    for s in await store.stranded_runs(grace, limit=LIMIT):
        key = (s.run.workflow, s.run.version)
        stranded[key] = stranded.get(key, 0) + 1
    runnable = {(b.workflow, b.version): b.runnable for b in await store.backlog()
                if b.runnable}
    serving: dict[tuple[str, int], int] = {}
    live: set[str] = set()
    for h in await store.worker_hosts(limit=LIMIT):
        until = h.live_until if h.live_until is not None else h.seen_at + grace
        if h.stopped_at is not None or until < now or h.role != HostRole.HOSTS:
            continue
        live.add(h.worker_id)
        workflow, _, version = h.code.rpartition("@")
        key = (workflow, int(version))
        serving[key] = serving.get(key, 0) + 1
    return Reading(now, gauges, stranded, runnable, serving, len(live))


NO_QUEUE = "(none)"  # the queue label of runs in no queue (an empty label is no label)


def _queue(name: str) -> str:
    return name or NO_QUEUE


def _age(now: float, since: float | None) -> float:
    return 0.0 if since is None else max(now - since, 0.0)


class Fleet:
    """Registers the store's gauges on a meter provider; `refresh()` before
    each collection gives them the values they report."""

    def __init__(self, meter_provider: MeterProvider) -> None:
        from opentelemetry.metrics import Observation

        self._observation = Observation
        self.latest: Reading | None = None
        self.up = False
        meter = meter_provider.get_meter("stead.fleet")

        def gauge(name: str, unit: str, what: str,
                  values: Callable[[CallbackOptions], Iterable[Observation]]) -> None:
            meter.create_observable_gauge(name, [values], unit=unit, description=what)

        gauge("stead.store.up", "1", "1 if this scrape could read the store, else 0",
              self._up)
        gauge("stead.runs", "{run}", "Live runs by workflow, version and status", self._runs)
        gauge("stead.runs.oldest_age", "s",
              "Age of the oldest live run in each status, since it last changed",
              self._oldest)
        gauge("stead.queue.runnable", "{run}", "Runs a worker could claim now, by queue",
              self._queue_depth)
        gauge("stead.queue.oldest_age", "s",
              "How long the longest-waiting claimable run of each queue has been ready",
              self._queue_age)
        gauge("stead.workflow.runnable", "{run}",
              "Runs a worker could claim now, by workflow and version", self._runnable)
        gauge("stead.workers.live", "{worker}",
              "Live workers (by heartbeat) hosting each workflow and version", self._serving)
        gauge("stead.workers", "{worker}", "Live workers, by heartbeat", self._workers)
        gauge("stead.runs.stranded", "{run}",
              "Runnable runs no live worker has served (by workflow and version)",
              self._stranded)
        gauge("stead.effects.unknown", "{effect}",
              "Runs stopped on an effect whose outcome is unknown (stead reconcile)",
              self._unknown)
        gauge("stead.effects.unknown_oldest_age", "s",
              "How long the oldest effect whose outcome is unknown has waited for a person",
              self._unknown_age)
        gauge("stead.waits.open", "{wait}", "Open waits (for a person or an event)",
              self._waits)
        gauge("stead.waits.expiring", "{wait}", "Open waits that expire within the hour",
              self._expiring)
        gauge("stead.journal.days_ahead", "{day}",
              "Days after today (UTC) whose journal partitions are made (PostgreSQL); "
              "-1: today's is missing", self._days_ahead)

    async def refresh(self, store: Store, *, grace: float) -> None:
        """Read the store for the next collection; on a store error the gauges
        report nothing and `stead_store_up` 0."""
        try:
            self.latest = await read(store, grace=grace)
            self.up = True
        except Exception as exc:  # a scrape reports what it can, it never fails
            log.warning("metrics: could not read the store: %s", exc)
            self.latest, self.up = None, False

    # -- the callbacks ----------------------------------------------------------------
    def _obs(self, value: float, labels: dict[str, str] | None = None) -> Observation:
        return self._observation(value, labels)

    def _up(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [self._obs(1.0 if self.up else 0.0)]

    def _runs(self, _options: CallbackOptions) -> Iterable[Observation]:
        r = self.latest
        if r is None:
            return []
        return [self._obs(x.runs, {"workflow": x.workflow, "version": str(x.version),
                                   "status": x.status}) for x in r.gauges.live]

    def _oldest(self, _options: CallbackOptions) -> Iterable[Observation]:
        r = self.latest
        if r is None:
            return []
        oldest: dict[str, float] = {}
        for x in r.gauges.live:
            oldest[x.status] = max(oldest.get(x.status, 0.0), _age(r.now, x.oldest))
        return [self._obs(age, {"status": status}) for status, age in sorted(oldest.items())]

    def _queue_depth(self, _options: CallbackOptions) -> Iterable[Observation]:
        r = self.latest
        return [] if r is None else [self._obs(q.runnable, {"queue": _queue(q.queue)})
                                     for q in r.gauges.queues]

    def _queue_age(self, _options: CallbackOptions) -> Iterable[Observation]:
        r = self.latest
        if r is None:
            return []
        return [self._obs(_age(r.now, q.ready_since), {"queue": _queue(q.queue)})
                for q in r.gauges.queues]

    def _by_code(self, counts: dict[tuple[str, int], int] | None) -> Iterable[Observation]:
        return [self._obs(n, {"workflow": w, "version": str(v)})
                for (w, v), n in sorted((counts or {}).items())]

    def _runnable(self, _options: CallbackOptions) -> Iterable[Observation]:
        return self._by_code(None if self.latest is None else self.latest.runnable)

    def _serving(self, _options: CallbackOptions) -> Iterable[Observation]:
        return self._by_code(None if self.latest is None else self.latest.serving)

    def _stranded(self, _options: CallbackOptions) -> Iterable[Observation]:
        return self._by_code(None if self.latest is None else self.latest.stranded)

    def _workers(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [] if self.latest is None else [self._obs(self.latest.workers)]

    def _unknown(self, _options: CallbackOptions) -> Iterable[Observation]:
        r = self.latest
        if r is None:
            return []
        return [self._obs(sum(x.runs for x in r.gauges.live
                              if x.status == RunStatus.OUTCOME_UNKNOWN))]

    def _unknown_age(self, _options: CallbackOptions) -> Iterable[Observation]:
        r = self.latest
        if r is None:
            return []
        return [self._obs(max((_age(r.now, x.oldest) for x in r.gauges.live
                               if x.status == RunStatus.OUTCOME_UNKNOWN), default=0.0))]

    def _waits(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [] if self.latest is None else [self._obs(self.latest.gauges.waits_open)]

    def _expiring(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [] if self.latest is None else [self._obs(self.latest.gauges.waits_expiring)]

    def _days_ahead(self, _options: CallbackOptions) -> Iterable[Observation]:
        days = None if self.latest is None else self.latest.gauges.days_ahead
        return [] if days is None else [self._obs(days)]
