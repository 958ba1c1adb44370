"""A queue's limits hold across worker processes, on both stores: three real
workers (tests/workers/queue_worker.py, four slots each) claim one queue's
runs while this test samples the database; it never sees more runs leased
than the queue allows, in all or on one worker, nor more started within a
rate's period (read from each run's first claim)."""

from __future__ import annotations

import asyncio
import collections
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import stead
from tests.workers import queue_worker
from tests.workers.procs import DEADLINE

SCRIPT = Path(__file__).parent / "workers" / "queue_worker.py"
WORKERS = 3

pytestmark = pytest.mark.slow


class Sampled:
    """The most runs of the queue seen leased at once: in all, and on one worker."""

    def __init__(self) -> None:
        self.most = 0
        self.most_per_worker = 0
        self.workers: set[str] = set()
        self.samples = 0

    def add(self, leased: list[stead.records.RunRow], queue: str) -> None:
        mine = [r for r in leased if r.queue == queue]
        per = collections.Counter(r.lease_owner for r in mine)
        self.most = max(self.most, len(mine))
        self.most_per_worker = max([self.most_per_worker, *per.values()])
        self.workers |= {w for w in per if w}
        self.samples += 1


async def run_queue(db_url: str, tmp: Path, queue: str, count: int, seconds: float,
                    slots: int = 4) -> tuple[Sampled, list[stead.records.RunRow]]:
    """Start `count` runs of `queue`, run three workers, sample until done."""
    store = await stead.open_store(db_url)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        client = stead.Client(store, queue_worker.app)
        await client.start_many([stead.Start("hold", [seconds], queue=queue)
                                 for _ in range(count)])
        for i in range(WORKERS):
            with open(tmp / f"worker-{i}.log", "wb") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, str(SCRIPT), "--db", db_url, "--worker-id", f"w{i}",
                     "--slots", str(slots)],
                    stdout=out, stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"}))
        sampled = Sampled()
        deadline = time.monotonic() + DEADLINE
        while any(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, "the workers did not finish"
            sampled.add(await store.leased_runs(limit=1000), queue)
            await asyncio.sleep(0.01)
        logs = "\n".join((tmp / f"worker-{i}.log").read_text() for i in range(WORKERS))
        assert [p.returncode for p in procs] == [0] * WORKERS, logs
        runs = await store.list_runs(limit=1000)
        assert len(runs) == count and {r.status for r in runs} == {"completed"}, logs
        return sampled, runs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        await store.close()


async def test_concurrency_holds_across_workers(db_url: str, tmp_path: Path) -> None:
    limit = queue_worker.CONCURRENCY.concurrency
    # Two slots a worker: the limit (3) is reached only by several workers at once.
    sampled, _ = await run_queue(db_url, tmp_path, "conc", 15, 0.3, slots=2)
    assert sampled.most == limit, vars(sampled)  # reached, never passed
    assert sampled.most_per_worker <= 2 and len(sampled.workers) >= 2, vars(sampled)


async def test_per_worker_holds_on_each_worker(db_url: str, tmp_path: Path) -> None:
    limit = queue_worker.PER_WORKER.per_worker
    sampled, _ = await run_queue(db_url, tmp_path, "perw", 9, 0.3)
    assert sampled.most_per_worker == limit, vars(sampled)
    assert sampled.most <= WORKERS * limit, vars(sampled)
    assert len(sampled.workers) >= 2, vars(sampled)


async def test_rate_holds_over_every_period(db_url: str, tmp_path: Path) -> None:
    rate, period = queue_worker.RATE.rate, queue_worker.RATE.period
    assert rate is not None
    _, runs = await run_queue(db_url, tmp_path, "rate", 10, 0.05)
    starts = sorted(r.started_at for r in runs if r.started_at is not None)
    assert len(starts) == 10
    # A claim counts the starts after now - period: none may see more than the rate.
    in_window = [sum(1 for s in starts if t - period < s <= t) for t in starts]
    assert max(in_window) == rate, in_window
    assert starts[-1] - starts[0] >= 2 * period  # 10 runs at 4 a second: three windows
