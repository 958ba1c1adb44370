"""`stead workers drain ID` on both stores: the request goes through the
database; the worker stops claiming and releases its run at the next call
boundary, and another live worker takes it over and finishes it."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner

import stead
from stead.cli import main
from tests.helpers import Gate


async def test_a_drained_worker_hands_its_run_to_another(store: stead.Store,
                                                         db_url: str) -> None:
    app = stead.App("drain")
    gate = Gate()
    ran: list[str] = []

    @app.workflow()
    async def two(run: stead.Run) -> str:
        await run.step("first", gate.step)
        return str(await run.step("second", lambda: ran.append("second") or "done"))

    client = stead.Client(store, app)
    info = await client.start(two)
    options = stead.WorkerOptions(drain_check=0.05, heartbeat=0.2)
    first = stead.Worker(app, store, options)
    working = asyncio.create_task(first.run())
    await gate.reached.wait()  # the first worker is inside the run's first step

    answer = await asyncio.to_thread(CliRunner().invoke, main, [
        "--db", db_url, "workers", "drain", first.id, "--by", "ops", "--why", "node upgrade"])
    assert answer.exit_code == 0, answer.output
    assert json.loads(await store.drain_requested(first.id) or "{}")["why"] == "node upgrade"
    await asyncio.sleep(0.3)  # seen: it stops claiming, the run goes on to its boundary
    gate.open.set()
    await asyncio.wait_for(working, 30)  # released at the boundary, then it stopped
    assert (await store.get_run(info.run_id)).lease_owner is None  # released, not held
    assert ran == []
    assert await store.drain_requested(first.id) is None  # forgotten as it stopped

    second = stead.Worker(app, store)
    assert await second.run_until_done([info.run_id], timeout=30)
    assert await client.result(info.run_id) == "done" and ran == ["second"]


async def test_draining_a_worker_that_is_not_live_says_so(store: stead.Store,
                                                          db_url: str) -> None:
    answer = await asyncio.to_thread(CliRunner().invoke, main, [
        "--db", db_url, "workers", "drain", "nobody", "--by", "ops", "--why", "x"])
    assert answer.exit_code == 1
    assert "no live worker nobody" in answer.output
