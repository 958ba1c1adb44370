"""Deploying version 2 while runs of version 1 wait, with real `stead worker`
processes, on both stores, in the three ways a deploy can go: version 1 is
still hosted (its runs go back to it), a migration is registered (the run is
migrated, its old journal kept, a rollback restores it, `check_migration`
passes), or neither (the run is stranded, flagged, and served when a version
1 worker returns). The app is tests/deploy_app.py."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import stead
from stead.testing import check_migration, check_migration_async
from tests import deploy_app, stress

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 30.0 * stress.slow()  # scaled to the machine's load (tests/stress.py)


class Deploy:
    """The worker processes and command lines of one test, on one database."""

    def __init__(self, db_url: str, tmp: Path) -> None:
        self.db_url, self.tmp = db_url, tmp
        self.ledger = tmp / "notify.log"
        self.module = "tests.deploy_app"  # where `worker(app, ...)` finds `app`
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "DEPLOY_LEDGER": str(self.ledger),
                    "PYTHONUNBUFFERED": "1"}

    def worker(self, app: str, name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "stead", "--db", self.db_url, "worker",
                 f"{self.module}:{app}", "--worker-id", name, "--heartbeat", "0.2",
                 "--poll", "0.05", *args],
                cwd=self.tmp, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")[-3000:]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "stead", "--db", self.db_url, *args],
                              cwd=self.tmp, env=self.env, capture_output=True, text=True,
                              timeout=60)

    async def exited(self, proc: subprocess.Popen[bytes], name: str) -> int:
        deadline = time.monotonic() + DEADLINE
        while (code := proc.poll()) is None:
            assert time.monotonic() < deadline, f"{name} did not exit:\n{self.log(name)}"
            await asyncio.sleep(0.05)
        return code

    async def stop(self, proc: subprocess.Popen[bytes], name: str) -> None:
        proc.send_signal(signal.SIGTERM)
        assert await self.exited(proc, name) == 0, self.log(name)

    def sends(self) -> int:
        return len(self.ledger.read_text().splitlines()) if self.ledger.exists() else 0

    async def waiting_run(self, client: stead.Client) -> str:
        """A run of version 1, taken by a version 1 worker to its wait; the
        worker then exits (as a deploy stops it)."""
        info = await client.start("refund", "123", version=1, task_id="order-123")
        proc = self.worker("v1", "v1-worker", "--until-done", info.run_id)
        assert await self.exited(proc, "v1-worker") == 0, self.log("v1-worker")
        assert (await client.get(info.run_id)).status == "waiting"
        assert self.sends() == 1
        return info.run_id

    async def heard_from(self, client: stead.Client, name: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while not any(h.worker_id == name and h.stopped_at is None
                      for h in await client.workers()):
            assert time.monotonic() < deadline, f"no heartbeat from {name}:\n{self.log(name)}"
            await asyncio.sleep(0.05)


@pytest.fixture
async def deploy(db_url: str, tmp_path: Path) -> AsyncIterator[Deploy]:
    d = Deploy(db_url, tmp_path)
    yield d
    for proc in d.procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def _approve(client: stead.Client, run_id: str) -> None:
    delivery = await client.deliver(run_id, event_id="approval-1", kind="approval",
                                    payload={"approved": True})
    assert isinstance(delivery, stead.Accepted), delivery


async def test_a_run_goes_back_to_its_version_while_a_worker_hosts_it(
    store: stead.Store, deploy: Deploy,
) -> None:
    client = stead.Client(store, deploy_app.v1)
    run_id = await deploy.waiting_run(client)
    old = deploy.worker("v1", "old-worker")
    await deploy.heard_from(client, "old-worker")
    # The new deploy could migrate version 1, but a live worker still hosts it.
    new = deploy.worker("v2_migrating", "new-worker")
    await deploy.heard_from(client, "new-worker")
    await _approve(client, run_id)
    info = await client.wait_for(run_id, ["completed"], timeout=DEADLINE)
    assert info.version == 1 and info.result["version"] == 1
    assert (await client.resumes(run_id))[-1].worker_id == "old-worker"
    assert await client.migrations(run_id) == []
    assert deploy.sends() == 1
    await deploy.stop(old, "old-worker")
    await deploy.stop(new, "new-worker")


async def test_a_migrating_worker_judges_the_old_host_by_its_own_heartbeat_interval(
    store: stead.Store, deploy: Deploy,
) -> None:
    """The old worker beats every 3 s, the migrating one every 0.2 s: the old
    one is alive all along (by the interval it published), so no run moves."""
    client = stead.Client(store, deploy_app.v1)
    ids = [(await client.start("refund", f"o-{n}", version=1)).run_id for n in range(6)]
    first = deploy.worker("v1", "v1-worker", "--until-done", *ids)
    assert await deploy.exited(first, "v1-worker") == 0, deploy.log("v1-worker")
    old = deploy.worker("v1", "old-worker", "--heartbeat", "3")
    await deploy.heard_from(client, "old-worker")
    new = deploy.worker("v2_migrating", "new-worker")
    await deploy.heard_from(client, "new-worker")
    for run_id in ids:
        await _approve(client, run_id)
    for run_id in ids:
        info = await client.wait_for(run_id, ["completed"], timeout=DEADLINE)
        assert info.version == 1 and info.result["version"] == 1
        assert await client.migrations(run_id) == [], deploy.log("new-worker")
    await deploy.stop(old, "old-worker")
    await deploy.stop(new, "new-worker")


async def test_a_registered_migration_moves_the_run_keeps_its_journal_and_rolls_back(
    store: stead.Store, deploy: Deploy,
) -> None:
    client = stead.Client(store, deploy_app.v2_migrating)
    run_id = await deploy.waiting_run(stead.Client(store, deploy_app.v1))
    before = await client.journal(run_id)

    # Tested before it is deployed: migrated in memory, replayed dry by version 2.
    exported = await client.export_run(run_id)
    checked = await check_migration_async(deploy_app.v2_migrating, exported)
    assert checked.reused == len(before) and checked.finding is None
    with pytest.raises(AssertionError, match="would lose 2 record"):
        await check_migration_async(deploy_app.v2_lossy, exported)
    # The sync form works inside a running loop too (on a loop of its own).
    assert check_migration(deploy_app.v2_migrating, exported).reused == len(before)
    with pytest.raises(AssertionError, match="would lose 2 record"):
        check_migration(deploy_app.v2_lossy, exported)

    app = "tests.deploy_app:v2_migrating"
    dry = deploy.cli("runs", "migrate", run_id, "--app", app, "--to", "2", "--dry-run",
                     "--by", "alice")
    assert dry.returncode == 0 and "would move from version 1 to 2" in dry.stdout, dry
    assert (await client.get(run_id)).version == 1

    moved = deploy.cli("runs", "migrate", run_id, "--app", app, "--to", "2", "--by", "alice")
    assert moved.returncode == 0 and "migration 1 recorded (by alice" in moved.stdout, moved
    info = await client.get(run_id)
    assert info.version == 2 and info.status == "waiting"
    assert [r.name for r in await client.journal(run_id)] == [
        "check_eligibility", *(r.name for r in before[1:])]
    assert await client.archived_journal(run_id, 1) == before
    assert (await client.resumes(run_id))[-1].details.migration == {"applied": [
        {"from_version": 1, "to_version": 2, "by": "alice", "records_before": len(before),
         "records_after": len(before)}]}

    back = deploy.cli("runs", "rollback", run_id, "--by", "alice")
    assert back.returncode == 0 and "back on refund@1" in back.stdout, back
    assert await client.journal(run_id) == before
    assert (await client.get(run_id)).version == 1
    [undone] = await client.migrations(run_id)
    assert undone.rolled_back_by == "alice" and undone.rolled_back_at is not None

    # Deployed: the worker migrates the run at the version gate when it wakes.
    new = deploy.worker("v2_migrating", "new-worker")
    await deploy.heard_from(client, "new-worker")
    await _approve(client, run_id)
    info = await client.wait_for(run_id, ["completed"], timeout=DEADLINE)
    assert info.version == 2
    assert info.result == {"version": 2, "eligible": True, "sent": f"{run_id}:1",
                           "approved": True, "currency": "EUR"}
    assert deploy.sends() == 1  # the effect's outcome was migrated, not sent again
    undone, applied = await client.migrations(run_id)
    assert applied.author == "worker new-worker" and applied.rolled_back_at is None
    assert await client.archived_journal(run_id, 2) == before
    audits = [r.details.migration for r in await client.resumes(run_id)
              if r.worker_id == "new-worker"]
    assert audits and audits[0] is not None
    assert audits[0]["applied"][0]["by"] == "worker new-worker"
    # Journaled since the migration (the run went on): no rollback now.
    refused = deploy.cli("runs", "rollback", run_id)
    assert refused.returncode != 0 and "nothing to roll back" in refused.stderr, refused
    shown = deploy.cli("runs", "show", run_id).stdout
    assert "1. refund@1 -> refund@2 by alice" in shown and "rolled back by alice" in shown
    assert "2. refund@1 -> refund@2 by worker new-worker" in shown
    await deploy.stop(new, "new-worker")


async def test_a_run_no_worker_hosts_is_stranded_flagged_and_served_when_one_returns(
    store: stead.Store, deploy: Deploy,
) -> None:
    client = stead.Client(store, deploy_app.v2)
    run_id = await deploy.waiting_run(stead.Client(store, deploy_app.v1))
    new = deploy.worker("v2", "new-worker")
    await deploy.heard_from(client, "new-worker")
    await _approve(client, run_id)  # wakes it: runnable, but only version 2 is hosted
    deadline = time.monotonic() + DEADLINE
    while not (stranded := await client.list_runs(stranded=True, grace=1.0)):
        assert time.monotonic() < deadline, "the run was never flagged"
        await asyncio.sleep(0.1)
    [info] = stranded
    assert info.run_id == run_id and info.stranded and info.hosted_at is not None
    assert info.status == "running" and info.lease_owner is None
    doctor = deploy.cli("doctor", "--grace", "1")
    assert doctor.returncode == 1, doctor
    assert f"run {run_id} (refund@1, running): no worker hosts refund@1 since" in doctor.stdout
    assert "new-worker: refund@2" in doctor.stdout
    listed = deploy.cli("runs", "ls", "--stranded", "--grace", "1")
    assert listed.returncode == 0 and "no worker hosts refund@1 since" in listed.stdout

    back = deploy.worker("v1", "returning-worker", "--until-done", run_id)
    assert await deploy.exited(back, "returning-worker") == 0, deploy.log("returning-worker")
    info = await client.get(run_id)
    assert info.status == "completed" and info.result["version"] == 1
    assert deploy.sends() == 1
    assert await client.list_runs(stranded=True, grace=0) == []
    healthy = deploy.cli("doctor", "--grace", "1")
    assert healthy.returncode == 0 and "stranded runs: 0" in healthy.stdout, healthy
    await deploy.stop(new, "new-worker")
