"""Shared test helpers (not fixtures)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import stead
from stead.workflow.waits import sign


class Crash(BaseException):
    """Stands in for a process dying mid-step, in-process: not an Exception,
    so neither the runtime nor workflow code handles it."""


class SkewedClock:
    """The system clock, `seconds` off: a machine whose clock is wrong."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def now(self) -> float:
        return time.time() + self.seconds


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


class Gate:
    """A step that holds its run until the test lets it through."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.open = asyncio.Event()

    async def step(self) -> str:
        self.reached.set()
        await self.open.wait()
        return "through"


async def run_until_gate(app: stead.App, store: stead.Store, gate: Gate) -> None:
    """Run until the gate step is reached, then stop the worker gracefully: the
    gate's record commits and the run is released at its next call, leaving a
    resumable run with a journal behind."""
    worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01))
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(gate.reached.wait(), 10)
    worker.stop()
    gate.open.set()
    await asyncio.wait_for(task, 10)


def approval_app() -> stead.App:
    """An app whose `confirm(order)` waits for an `approval` bound to the order."""
    app = stead.App("hostile")

    @app.workflow()
    async def confirm(run: stead.Run, order: str) -> Any:
        return await (await run.wait("approval", bind={"order_id": order}))

    return app


async def waiting_for_approval(store: stead.Store) -> tuple[stead.Client, str, str, str]:
    """A `confirm("o-1")` run of `approval_app` waiting: the client, the run,
    its wait and the wait's token."""
    app = approval_app()
    client = stead.Client(store, app)
    run_id = (await client.start("confirm", "o-1")).run_id
    await stead.Worker(app, store).run_until_idle()
    [w] = await client.waits(run_id=run_id)
    return client, run_id, w.wait_id, sign((await store.keyring()).current, run_id, w.wait_id)
