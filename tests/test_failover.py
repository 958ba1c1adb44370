"""Failover to a synchronous standby, with real worker processes
(tests/workers/liveness_worker.py) on a multi-host URL
(`host1:port1,host2:port2` with `target_session_attrs=read-write`): the
primary is stopped hard and the standby promoted while two workers run; every
acknowledged start and step is there, no payment is sent twice, progress
resumes within 5 s of the promotion. And the standby, before it is promoted,
serves the read-only commands without being migrated."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import stead
from stead import errors
from stead.records import RunStatus
from tests import pg
from tests.replicas import Replicated, read_only_url, replicated
from tests.test_liveness_processes import Fleet, _settled
from tests.workers.procs import SLOW, wait_until

pytestmark = pytest.mark.slow
RESUMED_WITHIN = 5.0  # the promise: progress after the promotion, scaled by SLOW


@pytest.fixture
def servers(pg_keys: None) -> Iterator[Replicated]:
    with replicated() as r:
        yield r


def _stead(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STEAD_DATABASE_URL": url}
    return subprocess.run([sys.executable, "-m", "stead", *args], env=env,
                          capture_output=True, text=True, timeout=120)


async def test_a_fleet_fails_over_to_a_synchronous_standby_losing_and_doubling_nothing(
    tmp_path: Path, servers: Replicated,
) -> None:
    url = servers.url(schema="stead")
    store = await stead.open_store(url)
    fleet = Fleet(tmp_path, url)
    try:
        client = stead.Client(store)
        run_ids = [(await client.start("charge", 16, 0.1, 0.3, version=1)).run_id
                   for _ in range(10)]
        fleet.start("a")
        fleet.start("b")
        await wait_until("the workers to be under way", lambda: len(fleet.lines("steps.log")) >= 30)
        before = len(fleet.lines("steps.log"))
        promoted = await asyncio.to_thread(servers.fail_over)
        await wait_until("a step after the promotion",
                         lambda: len(fleet.lines("steps.log")) > before + 2,
                         timeout=60 * SLOW)
        resumed = time.monotonic() - promoted
        print(f"progress resumed {resumed:.2f} s after the promotion")
        assert resumed < RESUMED_WITHIN * SLOW, f"resumed after {resumed:.1f} s"
        deadline = time.monotonic() + 180 * SLOW
        while not await _settled(store, run_ids):
            assert time.monotonic() < deadline, fleet.output("a") + fleet.output("b")
            await asyncio.sleep(0.3)
        for run_id in run_ids:  # every acknowledged start is there, and finished
            row = await store.get_run(run_id)
            assert row.status == RunStatus.COMPLETED, (row.status, row.error)
            assert json.loads(row.result or "null") == [f"s{i}" for i in range(16)]
        paid = fleet.paid()
        assert len(paid) == len(run_ids) and set(paid.values()) == {1}, f"paid: {paid}"
        doubled = {k: n for k, n in fleet.steps().items() if n > 1}
        assert not doubled, f"steps ran twice: {doubled}"
    finally:
        fleet.stop_all()
        await store.close()


async def test_the_standby_serves_runs_ls_and_show_and_refuses_to_migrate(
    servers: Replicated,
) -> None:
    store = await stead.open_store(servers.url(schema="stead"))
    try:
        run_id = (await stead.Client(store).start("charge", 1, 0.0, 0.0, version=1)).run_id
    finally:
        await store.close()
    standby = read_only_url(servers, schema="stead")
    listed = _stead(standby, "runs", "ls")
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout
    shown = _stead(standby, "runs", "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert run_id in shown.stdout
    # A schema the primary never made: refused in one line, nothing created.
    missing = _stead(read_only_url(servers, schema="stead_missing"), "runs", "ls")
    assert missing.returncode != 0
    assert "read-only" in missing.stderr and "CREATE" not in missing.stderr, missing.stderr
    with pytest.raises(errors.SchemaBehind, match="Migrate on the primary"):
        await stead.open_store(read_only_url(servers, schema="stead_missing"))


async def test_a_read_only_role_reads_runs_without_migrating(pg_url: str) -> None:
    """The same on the test server, cheaply: transactions read-only by default."""
    await (await stead.open_store(pg_url)).close()  # made by a writer first
    ro = pg.with_query(pg_url, options="-c default_transaction_read_only=on")
    listed = _stead(ro, "runs", "ls")
    assert listed.returncode == 0, listed.stderr
