"""What an operator sees and does: a run's lease in `runs show`, runs no worker
hosts, `worker --until-done`, and a crashed worker's lease under `--until-idle`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import stead
from stead.records import Fence, Record, RecordKind, RecordStatus
from stead.views import timeline
from tests.ops_app import cli


def _hello_app() -> stead.App:
    app = stead.App("ops")

    @app.workflow()
    async def hello(run: stead.Run, name: str) -> str:
        return await run.step("greet", lambda: f"hello {name}")

    return app


def _info(**changes: Any) -> stead.RunInfo:
    base = stead.RunInfo(
        run_id="r1", workflow="refund_order", version=1, task_id=None, status="running",
        epoch=2, created_at=1000.0, updated_at=1000.0, lease_owner="w-dead",
        lease_expires_at=1030.0,
    )
    return stead.RunInfo(**{**base.__dict__, **changes})


# -- runs show: the lease and the last update -----------------------------------------
def test_runs_show_says_a_lease_expired_and_the_run_waits_for_a_worker() -> None:
    out = timeline.render_run(_info(), [], [], now=1042.0)
    assert ("lease     lease held by w-dead expired at 1970-01-01 00:17:10Z (12.000s ago): "
            "expired, waiting for a worker hosting refund_order@1") in out
    held = timeline.render_run(_info(), [], [], now=1020.0)
    assert "lease held by w-dead until 1970-01-01 00:17:10Z (in 10.000s)" in held
    pending = timeline.render_run(_info(status="pending", lease_owner=None), [], [], now=1.0)
    assert "not started: waiting for a worker hosting refund_order@1" in pending


def test_runs_show_updated_is_the_last_record_when_later() -> None:
    rec = Record(0, "0", 1, RecordKind.STEP, "greet", "d", RecordStatus.OK, '"hi"', 2, 1065.0)
    out = timeline.render_run(_info(), [rec], [], now=1070.0)
    assert "updated   1970-01-01 00:17:45Z  (+1m05s)" in out
    assert timeline.show_json(_info(), [rec], [])["run"]["updated_at"] == 1065.0


async def test_runs_show_of_a_crashed_workers_run(fstore: stead.Store,
                                                   clock: stead.FakeClock) -> None:
    client = stead.Client(fstore, _hello_app())
    run_id = (await client.start("hello", "ada")).run_id
    [row] = await fstore.claim("w-dead", ["hello@1"], 30.0, 1)
    clock.advance(45)
    info = await client.get(run_id)
    assert info.lease_expires_at == row.lease_expires_at
    out = timeline.render_run(info, [], [], now=clock.now())
    assert "(15.000s ago): expired, waiting for a worker hosting hello@1" in out


# -- runs nobody here hosts --------------------------------------------------------------
async def test_the_worker_names_what_is_pending_that_it_does_not_host(
    store: stead.Store,
) -> None:
    client = stead.Client(store)
    for _ in range(3):
        await client.start("refund_order", "x", version=1)
    await client.start("hello", "ada", version=1)
    worker = stead.Worker(_hello_app(), store)
    await worker.run_until_idle()
    [unhosted] = await worker.unhosted()
    assert (unhosted.code, unhosted.runnable) == ("refund_order@1", 3)


def test_worker_until_idle_prints_unhosted_versions(app_spec: str, sqlite_url: str) -> None:
    async def start() -> None:
        store = await stead.open_store(sqlite_url)
        try:
            await stead.Client(store).start("refund_order", "x", version=1)
            await stead.Client(store).start("refund_order", "y", version=2)
        finally:
            await store.close()

    asyncio.run(start())
    out = cli(sqlite_url, "worker", app_spec, "--until-idle", "--poll", "0.05")
    assert out.exit_code == 0, out.output
    assert "pending, not hosted by this worker: refund_order@1 (1 run(s))" in out.output
    assert "pending, not hosted by this worker: refund_order@2 (1 run(s))" in out.output


# -- --until-done and a crashed worker's lease ---------------------------------------------
async def test_until_idle_waits_out_a_crashed_workers_lease(store: stead.Store) -> None:
    app = _hello_app()
    client = stead.Client(store, app)
    run_id = (await client.start("hello", "ada")).run_id
    await store.claim("w-crashed", ["hello@1"], 0.5, 1)  # it died holding the lease
    worker = stead.Worker(app, store, stead.WorkerOptions(lease_seconds=5, poll_interval=0.05))
    await asyncio.wait_for(worker.run_until_idle(), 10)
    info = await client.get(run_id)
    assert info.status == "completed" and info.epoch == 2


async def test_until_idle_does_not_wait_for_a_live_workers_lease(store: stead.Store) -> None:
    app = _hello_app()
    client = stead.Client(store, app)
    run_id = (await client.start("hello", "ada")).run_id
    [row] = await store.claim("w-alive", ["hello@1"], 3.0, 1)

    async def renew() -> None:
        while True:
            await asyncio.sleep(0.1)
            await store.renew([Fence(run_id, row.epoch, "w-alive")], 3.0)

    renewing = asyncio.create_task(renew())
    try:
        worker = stead.Worker(app, store, stead.WorkerOptions(lease_seconds=5,
                                                               poll_interval=0.05))
        await asyncio.wait_for(worker.run_until_idle(), 10)
    finally:
        renewing.cancel()
    assert (await client.get(run_id)).lease_owner == "w-alive"


async def test_until_done_finishes_the_named_runs_after_a_crash(store: stead.Store) -> None:
    app = _hello_app()
    client = stead.Client(store, app)
    first = (await client.start("hello", "ada")).run_id
    second = (await client.start("hello", "bob")).run_id
    await store.claim("w-crashed", ["hello@1"], 0.5, 2)
    worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.05))
    assert await asyncio.wait_for(worker.run_until_done([first, second], timeout=10), 15)
    assert [(await client.get(r)).status for r in (first, second)] == ["completed"] * 2


async def test_until_done_stops_at_a_run_waiting_for_a_person_and_times_out(
    store: stead.Store,
) -> None:
    app = stead.App("ops")

    @app.workflow()
    async def confirm(run: stead.Run) -> Any:
        return await (await run.wait("approval"))

    client = stead.Client(store, app)
    waiting = (await client.start("confirm")).run_id
    worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.05))
    assert await asyncio.wait_for(worker.run_until_done([waiting], timeout=10), 15)
    assert (await client.get(waiting)).status == "waiting"

    stuck = (await client.start("confirm")).run_id
    await store.claim("w-alive", ["confirm@1"], 60.0, 1)  # held, not ending soon
    worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.05))
    assert not await worker.run_until_done([stuck], timeout=0.3)
    with pytest.raises(stead.UnknownRun):
        await worker.run_until_done(["no-such-run"])


def test_worker_until_done_on_the_command_line(app_spec: str, sqlite_url: str) -> None:
    async def start() -> str:
        store = await stead.open_store(sqlite_url)
        try:
            return (await stead.Client(store).start("hello", "ada", version=1)).run_id
        finally:
            await store.close()

    run_id = asyncio.run(start())
    out = cli(sqlite_url, "worker", app_spec, "--until-done", run_id, "--timeout", "20",
              "--poll", "0.05")
    assert out.exit_code == 0, out.output
    assert f"run {run_id}: completed" in out.output
    usage = cli(sqlite_url, "worker", app_spec, "--until-done")
    assert usage.exit_code == 1 and "--until-done takes the runs" in usage.output
