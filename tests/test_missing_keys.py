"""A PostgreSQL worker with no key to sign wait tokens: it stops, saying so in
one line, at the first run that opens a wait with a token (a retry never
brings a key), leaving the run to a worker that has one; a worker whose runs
need no token says nothing about keys."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import stead
import stead.keys
from tests.ops_app import cli

NO_KEY = "no key to sign wait tokens"


@pytest.fixture
def no_keys(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv(stead.keys.SECRET_ENV, raising=False)
    monkeypatch.delenv(stead.keys.KEY_FILE_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return pg_url


async def test_a_worker_without_keys_stops_at_the_first_token_wait(
    no_keys: str, caplog: pytest.LogCaptureFixture,
) -> None:
    app = stead.App("keys")

    @app.workflow()
    async def approve(run: stead.Run) -> str:
        await run.step("prepare", lambda: "ready")
        return str(await (await run.wait("approval")))

    store = await stead.open_store(no_keys)
    try:
        run_id = (await stead.Client(store, app).start(approve)).run_id
        worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01))
        with pytest.raises(stead.KeysUnavailable, match=NO_KEY):
            await asyncio.wait_for(worker.run_until_idle(), 30)
        row = await store.get_run(run_id)
        assert row.status == "running" and row.lease_owner is None  # released, not failed
        told = [r.getMessage() for r in caplog.records if NO_KEY in r.getMessage()]
        assert len(told) == 1 and f"run {run_id} opens a wait with a token" in told[0]
    finally:
        await store.close()


def test_stead_worker_without_keys_exits_1_saying_so_once(no_keys: str, app_spec: str) -> None:
    started = cli(no_keys, "start", app_spec, "confirm", "[]", "-q")
    assert started.exit_code == 0, started.output
    out = cli(no_keys, "worker", app_spec, "--until-idle", "--poll", "0.05")
    assert out.exit_code == 1, out.output
    told = [line for line in out.output.splitlines() if NO_KEY in line]
    assert len(told) == 1 and "stops" in told[0], out.output


def test_a_worker_whose_runs_need_no_token_says_nothing_about_keys(
    no_keys: str, app_spec: str,
) -> None:
    started = cli(no_keys, "start", app_spec, "hello", '["ada"]', "-q")
    assert started.exit_code == 0, started.output
    out = cli(no_keys, "worker", app_spec, "--until-idle", "--poll", "0.05")
    assert out.exit_code == 0, out.output
    assert NO_KEY not in out.output, out.output
