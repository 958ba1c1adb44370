"""A tenant's concurrency limit holds across worker processes killed with
SIGKILL, on both stores: three real workers (tests/workers/tenant_worker.py,
three slots each) claim the runs of a limited tenant and of another while
this test samples the database and kills a worker twice (each time starting
another in its place). It never sees more of the limited tenant's runs leased
than its limit, the other tenant's runs go on beside them, and every run
completes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import stead
from stead.records import RunStatus
from tests.workers import tenant_worker
from tests.workers.procs import DEADLINE, wait_until

SCRIPT = Path(__file__).parent / "workers" / "tenant_worker.py"
WORKERS = 3

pytestmark = pytest.mark.slow


def _spawn(db_url: str, tmp: Path, name: str) -> subprocess.Popen[bytes]:
    with open(tmp / f"{name}.log", "wb") as out:
        return subprocess.Popen(
            [sys.executable, str(SCRIPT), "--db", db_url, "--worker-id", name],
            stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})


async def test_a_tenants_limit_holds_under_sigkills(db_url: str, tmp_path: Path) -> None:
    store = await stead.open_store(db_url)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        client = stead.Client(store, tenant_worker.app)
        # Every worker is up before the runs start, so all nine slots claim
        # together: the limited tenant takes three of them and no more, the
        # other tenant the rest (a worker's start takes a second or more on a
        # loaded box, and then the runs would be done before the last came).
        for i in range(WORKERS):
            procs[f"w{i}"] = _spawn(db_url, tmp_path, f"w{i}")
        names = set(procs)

        async def up() -> bool:  # each has sent its first heartbeat
            return names <= {h.worker_id for h in await store.worker_hosts()}

        await wait_until("the workers to start", up)
        capped = {i.run_id for i in await client.start_many(
            [stead.Start("hold", [0.4], tenant=tenant_worker.CAPPED) for _ in range(18)])}
        other = {i.run_id for i in await client.start_many(
            [stead.Start("hold", [0.4], tenant="other") for _ in range(18)])}
        most = most_other = 0
        kills = 0
        deadline = time.monotonic() + DEADLINE
        while True:
            assert time.monotonic() < deadline, "the runs did not all complete"
            leased = await store.leased_runs(limit=1000)
            ids = {r.run_id for r in leased}
            most = max(most, len(ids & capped))
            most_other = max(most_other, len(ids & other))
            done = await store.count_runs()
            if done.get(RunStatus.COMPLETED, 0) == len(capped) + len(other):
                break
            # Kill a worker while it holds runs of the limited tenant, twice,
            # and start another in its place: the limit holds while those
            # runs are taken over.
            holders = sorted({r.lease_owner for r in leased if r.run_id in capped}
                             & {n for n, p in procs.items() if p.poll() is None})
            if kills < 2 and holders:
                victim = holders[0]
                os.kill(procs[victim].pid, signal.SIGKILL)
                procs[victim].wait()
                procs[f"r{kills}"] = _spawn(db_url, tmp_path, f"r{kills}")
                kills += 1
            await asyncio.sleep(0.01)
        logs = "\n".join(p.read_text() for p in sorted(tmp_path.glob("*.log")))
        assert kills == 2, logs
        assert most == tenant_worker.CONCURRENCY, (most, logs)  # reached, never passed
        assert most_other > tenant_worker.CONCURRENCY, (most_other, logs)  # not held back
        results = [await client.result(r) for r in sorted(capped | other)]
        assert results == [0.4] * len(results)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        await store.close()
