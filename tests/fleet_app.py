"""An app for tests/test_fleet_processes.py: `hold(name)` runs one step that
lasts until the file FLEET_RELEASE names exists, so every run it starts stays
held by the worker that claimed it until the test lets go."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import stead

app = stead.App("fleet")


async def held(name: str) -> str:
    release = Path(os.environ["FLEET_RELEASE"])
    while not release.exists():  # the test's signal, not a timing guess
        await asyncio.sleep(0.05)
    return name


@app.workflow()
async def hold(run: stead.Run, name: str) -> str:
    return await run.step("held", held, name)


def tick(i: int) -> int:
    return i + 1  # a sync step: it runs on a thread of the worker's


async def atick(i: int) -> int:
    await asyncio.sleep(0)
    return i + 1


@app.workflow()
async def churn(run: stead.Run, steps: int) -> int:
    """Work that keeps a worker busy: sync and async steps, one after another."""
    n = 0
    for i in range(steps):
        n = await run.step(f"s{i}", tick if i % 2 else atick, n)
    return n
