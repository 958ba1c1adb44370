"""Shared test helpers (not fixtures)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import stead


class Crash(BaseException):
    """Stands in for a process dying mid-step, in-process: not an Exception,
    so neither the runtime nor workflow code handles it."""


class Calls(Counter[str]):
    def hit(self, name: str) -> None:
        self[name] += 1


async def crash_then_resume(
    app: stead.App, store: stead.Store, clock: stead.FakeClock, lease: float = 30.0
) -> None:
    """Run until a step raises `Crash`, then let the lease expire and a new worker finish."""
    first = stead.Worker(app, store, stead.WorkerOptions(lease_seconds=lease))
    await first.run_until_idle()
    clock.advance(lease + 1)
    second = stead.Worker(app, store, stead.WorkerOptions(lease_seconds=lease))
    await second.run_until_idle()


def payloads(records: list[stead.Record]) -> list[Any]:
    import json

    return [json.loads(r.payload) for r in records]
