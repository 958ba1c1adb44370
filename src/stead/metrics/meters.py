"""The counters and histograms stead records as it works, through the
OpenTelemetry metrics API (`pip install -e '.[metrics]'`), but for the live
calls' latency when stead serves /metrics itself (`Latency`).

Off until `instrument()` is called: every hook is then a no-op costing one
check of a module global, so the step path of an uninstrumented worker pays
nothing else. Once on, each hook adds one measurement; a step makes one, its
latency. Labels are bounded: a workflow's name, a kind, a cause, an outcome;
never a run id, a task id or a key.

The gauges that need the database (runs by status, queues, waits, stranded
runs) are not here: `stead.metrics.fleet` reads them when scraped.
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, Meter, MeterProvider

SCOPE = "stead"

# Latency buckets (seconds): a commit of a few milliseconds up to a model call
# of minutes.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 120.0, 300.0)


class Takeover(enum.StrEnum):
    """Why a run's lease moved to another worker."""

    DEAD_WORKER = "dead_worker"  # its holder was found dead (process gone, presence lost)
    LEASE_EXPIRY = "lease_expiry"  # a worker found the lease it held had run out under it
    DRAIN = "drain"  # its holder released it at a boundary, stopping (SIGTERM, drain)


class EffectOutcome(enum.StrEnum):
    DONE = "done"
    FAILED = "failed"
    UNKNOWN = "unknown"
    RECONCILED = "reconciled"


class Latency:
    """The live calls' latency histogram, kept by stead itself: what `stead
    worker --metrics-port` and `stead ui` serve. A record is a bisect and three
    additions under an uncontended lock; the OpenTelemetry SDK's record, on the
    step path in place, cost 26-41 µs of CPU per step (bench/metrics_cost.py),
    20 % of a step's CPU. A meter provider of your own (`instrument`) gets the
    OpenTelemetry histogram instead."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (kind, outcome) -> [count per bucket (the last: past every bound), sum]
        self.series: dict[tuple[str, str], tuple[list[int], list[float]]] = {}

    def record(self, kind: str, outcome: str, seconds: float) -> None:
        i = bisect.bisect_left(LATENCY_BUCKETS, seconds)
        with self._lock:
            found = self.series.get((kind, outcome))
            if found is None:
                found = self.series[(kind, outcome)] = ([0] * (len(LATENCY_BUCKETS) + 1),
                                                        [0.0])
            found[0][i] += 1
            found[1][0] += seconds

    def read(self) -> list[tuple[tuple[str, str], list[int], float]]:
        """Each series: its labels, its counts per bucket, its sum."""
        with self._lock:
            return [(key, list(counts), total[0])
                    for key, (counts, total) in sorted(self.series.items())]


@dataclasses.dataclass(frozen=True)
class _Meters:
    calls: Histogram | Latency
    claims: Histogram
    tokens: Counter
    effects: Counter
    takeovers: Counter
    renewals: Counter
    resumes: Counter
    refusals: Counter
    store_errors: Counter
    store_retries: Counter
    blocked: Counter
    finished: Counter


_M: _Meters | None = None

# The store errors a worker meets, reported at 0 until one comes.
STORE_ERRORS = ("StoreUnavailable", "StoreRejected", "DatabaseMissing")


def _build(meter: Meter, latency: Latency | None) -> _Meters:
    def counter(name: str, unit: str, what: str) -> Counter:
        return meter.create_counter(name, unit=unit, description=what)

    def histogram(name: str, what: str) -> Histogram:
        return meter.create_histogram(
            name, unit="s", description=what,
            explicit_bucket_boundaries_advisory=list(LATENCY_BUCKETS))

    return _Meters(
        calls=latency if latency is not None else histogram(
            "stead.call.duration",
            "How long live calls took (kind: step, llm, effect), retries apart"),
        claims=histogram("stead.claim.duration", "How long a worker's claim took"),
        tokens=counter("stead.model.tokens", "{token}",
                       "Tokens of live model calls (type: input, output); replays count none"),
        effects=counter("stead.effects", "{effect}", "Effect outcomes journaled, by outcome"),
        takeovers=counter("stead.takeovers", "{run}", "Leases moved off a worker, by cause"),
        renewals=counter("stead.lease.renewals", "{lease}",
                         "Leases a worker's renewals extended (outcome: renewed) or found "
                         "lost (outcome: lost)"),
        resumes=counter("stead.resumes", "{run}",
                        "Claims of a run that an earlier attempt had held"),
        refusals=counter("stead.fencing.refusals", "{write}",
                         "Writes refused because the writer no longer held the lease"),
        store_errors=counter("stead.store.errors", "{error}", "Store errors, by kind"),
        store_retries=counter("stead.store.retries", "{retry}",
                              "Store operations tried again, by kind"),
        blocked=counter("stead.event_loop.blocked", "s",
                        "Seconds the worker's event loop was blocked past the watchdog"),
        finished=counter("stead.runs.finished", "{run}", "Runs that ended, by status"),
    )


def instrument(*, meter_provider: MeterProvider | None = None,
               latency: Latency | None = None) -> None:
    """Record stead's counters and histograms through `meter_provider` (the
    global one by default); the live calls' latency in `latency` instead,
    when given (see `Latency`)."""
    global _M
    try:
        from opentelemetry import metrics
    except ImportError as exc:
        raise ImportError("stead.metrics needs OpenTelemetry: pip install -e '.[metrics]' in "
                          "stead's checkout (docs/install.md)") from exc
    _M = _build(metrics.get_meter(SCOPE, meter_provider=meter_provider), latency)
    _zero(_M)


def _zero(m: _Meters) -> None:
    """Report the counters an alert watches from the start, at 0: Prometheus's
    `increase()` misses the first event of a series that appears with it."""
    for cause in Takeover:
        m.takeovers.add(0, {"cause": str(cause)})
    for outcome in EffectOutcome:
        m.effects.add(0, {"outcome": str(outcome)})
    for renewal in ("renewed", "lost"):
        m.renewals.add(0, {"outcome": renewal})
    for kind in STORE_ERRORS:
        m.store_errors.add(0, {"kind": kind})
    m.resumes.add(0)
    m.refusals.add(0)
    m.blocked.add(0)


def uninstrument() -> None:
    """Stop recording: the hooks are no-ops again."""
    global _M
    _M = None


def enabled() -> bool:
    return _M is not None


# -- hooks --------------------------------------------------------------------------
def call_took(kind: str, seconds: float, *, ok: bool) -> None:
    """A live step, model call or effect took `seconds`."""
    if _M is None:
        return
    if isinstance(_M.calls, Latency):
        _M.calls.record(kind, "ok" if ok else "error", seconds)
    else:
        _M.calls.record(seconds, {"kind": kind, "outcome": "ok" if ok else "error"})


def claimed(seconds: float, runs: int) -> None:
    if _M is not None:
        _M.claims.record(seconds, {"found": "some" if runs else "none"})


def tokens(usage: Any) -> None:
    """The token usage of one live model call (a `Completion.usage`)."""
    if _M is None or usage is None:
        return
    for kind in ("input", "output"):
        n = getattr(usage, f"{kind}_tokens", None)
        if isinstance(n, int) and n > 0:
            _M.tokens.add(n, {"type": kind})


def effect(outcome: EffectOutcome) -> None:
    if _M is not None:
        _M.effects.add(1, {"outcome": str(outcome)})


def takeover(cause: Takeover, runs: int = 1) -> None:
    if _M is not None and runs > 0:
        _M.takeovers.add(runs, {"cause": str(cause)})


def renewed(renewed: int, lost: int) -> None:
    """One renewal of a worker's leases: how many it extended, how many it
    found lost (see `stead.worker.leases`)."""
    if _M is not None:
        _M.renewals.add(renewed, {"outcome": "renewed"})
        if lost:
            _M.renewals.add(lost, {"outcome": "lost"})


def resumed() -> None:
    if _M is not None:
        _M.resumes.add(1)


def refused() -> None:
    if _M is not None:
        _M.refusals.add(1)


def store_error(exc: BaseException) -> None:
    """A store error reached the worker (kind: its class, e.g. StoreUnavailable)."""
    if _M is not None:
        _M.store_errors.add(1, {"kind": type(exc).__name__})


def store_retry(kind: str) -> None:
    """The store tried an operation again (kind: locked, connection, conflict)."""
    if _M is not None:
        _M.store_retries.add(1, {"kind": kind})


def loop_blocked(seconds: float) -> None:
    if _M is not None and seconds > 0:
        _M.blocked.add(seconds)


def finished(status: str) -> None:
    if _M is not None:
        _M.finished.add(1, {"status": status})
