"""stead's metrics as Prometheus text: an OpenTelemetry meter provider read
by the OpenTelemetry Prometheus exporter into a registry of its own (not
prometheus_client's global one, so two expositions in one process, or an
application's own metrics, never collide)."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
        meters.instrument(meter_provider=self.provider)
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
