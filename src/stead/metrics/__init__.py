"""stead's metrics: counters and histograms recorded through the
OpenTelemetry metrics API (`instrument()`), gauges read from the store when
scraped (`stead.metrics.fleet`), and `/metrics`, `/healthz` and `/readyz`
served by `stead worker --metrics-port N` (`stead.metrics.endpoint`) and
`stead ui`. docs/reference/metrics.md lists every metric."""

from stead.metrics.meters import enabled, instrument, uninstrument

__all__ = ["enabled", "instrument", "uninstrument"]
