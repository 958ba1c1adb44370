"""A fleet of real `stead worker` processes on both stores: a burst of runs
spreads across the live workers instead of going to the first one awake.
The app is tests/fleet_app.py; the processes are run as tests/test_deploys.py
runs them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import stead
from tests import fleet_app
from tests.test_deploys import DEADLINE, Deploy

pytestmark = pytest.mark.slow


@pytest.fixture
async def fleet(db_url: str, tmp_path: Path) -> AsyncIterator[Deploy]:
    d = Deploy(db_url, tmp_path)
    d.module = "tests.fleet_app"
    d.env["FLEET_RELEASE"] = str(tmp_path / "release")
    yield d
    for proc in d.procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def _sees_a_peer(fleet: Deploy, name: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while "with 1 other live worker" not in fleet.log(name):
        assert time.monotonic() < deadline, f"{name} never saw its peer:\n{fleet.log(name)}"
        await asyncio.sleep(0.05)


async def test_a_burst_of_runs_spreads_across_two_live_workers(
    store: stead.Store, fleet: Deploy, tmp_path: Path,
) -> None:
    client = stead.Client(store, fleet_app.app)
    a = fleet.worker("app", "worker-a")
    b = fleet.worker("app", "worker-b")
    await _sees_a_peer(fleet, "worker-a")
    await _sees_a_peer(fleet, "worker-b")
    # One batch import: the four runs are committed together, as a burst is.
    # Started one by one they would be a trickle, each claimed by whichever
    # worker hears of it first.
    burst = [stead.Start(fleet_app.hold, (f"r{n}",)) for n in range(4)]
    ids = [info.run_id for info in await client.start_many(burst)]
    deadline = time.monotonic() + DEADLINE
    # Each run holds its worker until released: who claimed it stays visible.
    while True:
        infos = [await client.get(run_id) for run_id in ids]
        if all(i.lease_owner is not None and i.status == "running" for i in infos):
            break
        assert time.monotonic() < deadline, (fleet.log("worker-a"), fleet.log("worker-b"))
        await asyncio.sleep(0.05)
    owners = {i.lease_owner for i in infos}
    assert owners == {"worker-a", "worker-b"}, (fleet.log("worker-a"), fleet.log("worker-b"))
    (tmp_path / "release").touch()
    for run_id in ids:
        assert (await client.wait_for(run_id, ["completed"], timeout=DEADLINE)).status
    await fleet.stop(a, "worker-a")
    await fleet.stop(b, "worker-b")


ROUNDS = 10


async def test_a_worker_under_load_exits_soon_after_sigterm_every_time(
    store: stead.Store, fleet: Deploy,
) -> None:
    """SIGTERM lands while runs execute sync and async steps (some still being
    taken over): each time the process exits 0 within the deadline, its runs
    released at their next call boundary for the next one. The worker's grace
    (120 s) is longer than the deadline, so a run the stop never reached, cut
    off only when the grace ends, fails the test."""
    client = stead.Client(store, fleet_app.app)
    ids = [(await client.start(fleet_app.churn, 100_000)).run_id for _ in range(6)]
    for n in range(ROUNDS):
        name = f"worker-{n}"
        proc = fleet.worker("app", name, "--grace", "120")
        deadline = time.monotonic() + DEADLINE
        # Under load: it holds runs and has journaled steps of its own.
        while name not in {i.lease_owner for i in await _infos(client, ids)}:
            assert time.monotonic() < deadline, fleet.log(name)
            await asyncio.sleep(0.05)
        await fleet.stop(proc, name)  # exit 0 within DEADLINE, or the test fails
        assert f"worker {name} stopped" in fleet.log(name)
    ended = await _infos(client, ids)
    assert all(i.status != "completed" and i.lease_owner is None for i in ended), ended


async def _infos(client: stead.Client, ids: list[str]) -> list[stead.RunInfo]:
    return [await client.get(run_id) for run_id in ids]
