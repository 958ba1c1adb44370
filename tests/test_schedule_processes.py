"""One run per cron tick with three worker processes and a clock that jumps:
forward (the missed ticks are all fired, each once) and back (nothing is
fired twice). Real processes (tests/workers/schedule_worker.py), both
stores."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import stead
from stead.records import RunStatus
from tests.workers.procs import SLOW, wait_until

# Process-level, crash or long property tests: `pytest --full` (CI) runs them.
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "workers" / "schedule_worker.py"


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _ticks(path: Path) -> list[float]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [dt.datetime.fromisoformat(line).timestamp() for line in lines]


@pytest.mark.slow
async def test_one_run_per_tick_with_three_workers_and_a_clock_jump(
    db_url: str, tmp_path: Path, procs: list[subprocess.Popen[bytes]],
) -> None:
    clock, ticks = tmp_path / "clock", tmp_path / "ticks"
    clock.write_text("0")
    store = await stead.open_store(db_url)  # migrated before the workers race to
    try:
        for i in range(3):
            with open(tmp_path / f"worker-{i}.log", "wb") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, str(SCRIPT), "--db", db_url, "--clock", str(clock),
                     "--ticks", str(ticks)],
                    stdout=out, stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"}))
        await wait_until("ticks to fire", lambda: len(_ticks(ticks)) >= 3, timeout=60 * SLOW)

        clock.write_text("40")  # forward: 40 ticks pass at once
        jumped = time.time() + 40
        await wait_until("the missed ticks to fire",
                         lambda: bool(_ticks(ticks)) and max(_ticks(ticks)) >= jumped - 1,
                         timeout=60 * SLOW)
        clock.write_text("-20")  # back: a minute back; the next tick is a minute ahead
        await asyncio.sleep(2.0)
        fired_before_back = max(_ticks(ticks))

        async def settled() -> bool:  # one read: a run moving between the two is seen
            counts = await store.count_runs()
            return not counts.get(RunStatus.PENDING) and not counts.get(RunStatus.RUNNING)

        await wait_until("every tick's run to end", settled, timeout=60 * SLOW)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30 * SLOW)

        seen = _ticks(ticks)
        counts = Counter(seen)
        assert set(counts.values()) == {1}, [t for t, n in counts.items() if n > 1]
        ordered = sorted(counts)
        # Missed ticks: all fired, none skipped, none twice; nothing after the jump back.
        assert ordered == [ordered[0] + i for i in range(len(ordered))]
        assert len(ordered) >= 40
        assert max(ordered) <= fired_before_back + 1
        runs = await store.list_runs(limit=10_000)
        assert len(runs) == len(ordered)
        assert all(r.status == "completed" for r in runs)
        assert len({r.task_id for r in runs}) == len(runs)
    finally:
        await store.close()
