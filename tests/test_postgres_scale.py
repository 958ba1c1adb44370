"""Scale-out on PostgreSQL: 4 worker processes share 500 runs; two are
SIGKILLed mid-flight and one new worker joins. Every run completes; every
acknowledged step ran exactly once and a step in flight in a killed worker
ran once more, no more; every order was charged exactly once; and no run was
advanced by two workers at one epoch (the claims, the journal and the resume
records agree on who held which epoch)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

import stead
from tests import pg

# Process-level, crash or long property tests: `pytest --full` (CI) runs them.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "workers" / "pg_scale_worker.py"
RUNS = 500
STEPS = ("load", "price", "stock", "ship")


@pytest.fixture
def pg_url() -> Iterator[str]:
    with pg.fresh_schema() as url:
        yield url


class Fleet:
    def __init__(self, url: str, logs: Path) -> None:
        self.url, self.logs = url, logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, worker_id: str) -> None:
        out = open(self.logs / f"{worker_id}.out", "wb")  # noqa: SIM115 - the child keeps it
        self.procs[worker_id] = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--db", self.url, "--logs", str(self.logs),
             "--worker-id", worker_id, "--lease", "4", "--concurrency", "8"],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"},
        )
        out.close()

    def output(self, worker_id: str) -> str:
        return (self.logs / f"{worker_id}.out").read_text(errors="replace")[-3000:]

    def lines(self, name: str) -> list[list[str]]:
        path = self.logs / name
        return [line.split() for line in path.read_text().splitlines()] if path.exists() else []

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


async def _wait(what: str, pred: object, timeout: float) -> None:
    assert callable(pred)
    deadline = time.monotonic() + timeout
    while not await pred():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_four_workers_two_killed_one_restarted_run_500_runs_once(
    pg_url: str, tmp_path: Path
) -> None:
    store = await stead.open_store(pg_url)
    fleet = Fleet(pg_url, tmp_path)
    client = stead.Client(store)
    try:
        runs = {(await client.start("order", k, version=1)).run_id: k for k in range(RUNS)}

        async def completed() -> int:
            return len(await store.list_runs(status="completed", limit=RUNS + 1))

        for i in range(4):
            fleet.start(f"w{i}")
        await _wait("100 runs to complete", lambda: _at_least(completed, 100), 120)
        for victim in ("w0", "w1"):
            fleet.procs[victim].send_signal(signal.SIGKILL)
            assert fleet.procs[victim].wait(10) == -signal.SIGKILL
        killed_at = await completed()
        fleet.start("w4")
        await _wait("every run to complete", lambda: _at_least(completed, RUNS), 180)
        for worker_id in ("w2", "w3", "w4"):
            fleet.procs[worker_id].send_signal(signal.SIGTERM)
        for worker_id in ("w2", "w3", "w4"):
            code = fleet.procs[worker_id].wait(30)
            assert code == 0, fleet.output(worker_id)
        print(f"\n{killed_at} of {RUNS} runs had completed when w0 and w1 were killed")

        # Every run completed with the result of an uninterrupted one.
        for run_id, k in runs.items():
            assert await client.result(run_id, timeout=5) == {
                "k": k, "price": k * 10, "stock": k + 1, "charged": True,
            }

        # Who held which run at which epoch: one claim per (run, epoch).
        claims = [(run_id, int(epoch), worker) for worker, run_id, epoch in
                  fleet.lines("claims.log")]
        assert len({(r, e) for r, e, _ in claims}) == len(claims), "an epoch claimed twice"
        holder = {(r, e): w for r, e, w in claims}
        epochs_of: dict[tuple[str, str], set[int]] = defaultdict(set)
        for r, e, w in claims:
            epochs_of[(r, w)].add(e)
        ran = Counter((r, name, w) for r, name, w in fleet.lines("steps.log"))

        taken_over = 0
        for run_id in runs:
            journal = await store.load_journal(run_id)
            assert [r.seq for r in journal] == list(range(len(journal)))
            assert [r.epoch for r in journal] == sorted(r.epoch for r in journal)
            claimed = {e for (r, e) in holder if r == run_id}
            assert {r.epoch for r in journal} <= claimed, "a record from an epoch nobody held"
            resumes = await store.list_resumes(run_id)
            for res in resumes:  # each takeover was written by the worker holding it
                assert holder[(run_id, res.epoch)] == res.worker_id
            taken_over += bool(resumes)
            for rec in journal:
                if rec.kind != "step":
                    continue
                acknowledged_by = holder[(run_id, rec.epoch)]
                assert ran[(run_id, rec.name, acknowledged_by)] >= 1
                for (r, w), held in epochs_of.items():
                    if r != run_id:
                        continue
                    times = ran[(run_id, rec.name, w)]
                    if min(held) > rec.epoch:
                        assert times == 0, f"{rec.name} of {run_id} re-ran once acknowledged"
                    assert times <= len(held), f"{rec.name} of {run_id} ran twice in one attempt"
            if len(claimed) == 1:
                assert sum(ran[(run_id, s, w)] for s in STEPS for w in fleet.procs) == len(STEPS)
        assert taken_over > 0, "no run was in flight in a killed worker: the test proved little"

        # The outside world saw each order charged exactly once.
        charged = Counter(run_id for run_id, _key, _worker, _amount in fleet.lines("ledger.log"))
        assert charged == dict.fromkeys(runs, 1)
        print(f"{taken_over} runs were taken over from the killed workers")
    finally:
        fleet.kill_all()
        await store.close()


async def _at_least(count: object, n: int) -> bool:
    assert callable(count)
    return bool(await count() >= n)
