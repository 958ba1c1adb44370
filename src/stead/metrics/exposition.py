"""stead's metrics as Prometheus text: an OpenTelemetry meter provider read
by the OpenTelemetry Prometheus exporter into a registry of its own (not
prometheus_client's global one, so two expositions in one process, or an
application's own metrics, never collide)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from stead.metrics import fleet, meters
from stead.store import seam

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import CollectorRegistry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Exposition:
    """Turns stead's hooks on, registers the store's gauges, and renders both."""

    def __init__(self) -> None:
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from opentelemetry.sdk.metrics import MeterProvider
            from prometheus_client import CollectorRegistry
        except ImportError as exc:
            raise ImportError("serving metrics needs the metrics extra: pip install -e "
                              "'.[metrics]' in stead's checkout (docs/install.md)") from exc
        self.registry: CollectorRegistry = CollectorRegistry(auto_describe=False)
        reader = PrometheusMetricReader(disable_target_info=True, scope_info_enabled=False,
                                        registry=self.registry)
        self.provider: MeterProvider = MeterProvider(metric_readers=[reader])
        self.latency = meters.Latency()
        self.registry.register(_LatencyCollector(self.latency))
        meters.instrument(meter_provider=self.provider, latency=self.latency)
        seam.retried = meters.store_retry
        self.fleet = fleet.Fleet(self.provider)

    def render(self) -> bytes:
        """The Prometheus text of every metric, the gauges as last refreshed."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    def close(self) -> None:
        meters.uninstrument()
        seam.retried = seam.ignore_retry
        self.provider.shutdown()


class _LatencyCollector:
    """`stead_call_duration_seconds` from stead's own histogram (see `meters.Latency`)."""

    def __init__(self, latency: meters.Latency) -> None:
        self.latency = latency

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import HistogramMetricFamily

        family = HistogramMetricFamily(
            "stead_call_duration_seconds",
            "How long live calls took (kind: step, llm, effect), retries apart",
            labels=["kind", "outcome"], unit="seconds")
        bounds = [*(f"{b}" for b in meters.LATENCY_BUCKETS), "+Inf"]
        for labels, counts, total in self.latency.read():
            cumulative = list(itertools.accumulate(counts))
            family.add_metric(list(labels), list(zip(bounds, cumulative, strict=True)), total)
        yield family
