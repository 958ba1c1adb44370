"""`python -m bench.drain [--db sqlite|postgres|both] [--reps N]`

A graceful stop hands a run to another live worker at once: two `stead
worker` processes on one database, the first running a long run (steps of
about 20 ms); the first is asked to stop, by SIGTERM or by `stead workers
drain` (a request through the database, which the worker asks every 0.5 s),
and the time from the ask to the second worker's first step on the run is
measured. Target: under 1 s, both stores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import runner

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 60.0


def _steps(path: Path) -> list[tuple[float, int]]:
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        at, pid = line.split()
        found.append((float(at), int(pid)))
    return found


def _until(what: str, check: object) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.01)
    raise RuntimeError(f"bench.drain: {what} did not happen within {DEADLINE:g} s")


async def _start(url: str) -> str:
    import stead
    from bench.drain_app import app, long

    store = await stead.open_store(url)
    try:
        return (await stead.Client(store, app).start(long, 100_000)).run_id
    finally:
        await store.close()


async def _drain(url: str, worker_id: str) -> None:
    import stead

    store = await stead.open_store(url)
    try:
        await store.request_drain(worker_id, json.dumps({"by": "bench", "why": "bench"}))
    finally:
        await store.close()


def once(url: str, scratch: Path, how: str) -> float:
    """Seconds from the ask to the second worker's first step."""
    steps = scratch / "steps"
    steps.unlink(missing_ok=True)
    env = {**os.environ, "STEAD_DATABASE_URL": url, "DRAIN_STEPS": str(steps),
           "PYTHONPATH": str(ROOT)}
    asyncio.run(_start(url))
    procs = []
    try:
        def worker(name: str) -> subprocess.Popen[bytes]:
            proc = subprocess.Popen(
                [sys.executable, "-m", "stead", "worker", "bench.drain_app:app",
                 "--worker-id", name, "--heartbeat", "1", "--log-level", "warning"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(proc)
            return proc

        first = worker("first")
        _until("the first worker's steps", lambda: len(_steps(steps)) >= 5)
        worker("second")
        time.sleep(2.0)  # the second is up, idle, heartbeating
        asked = time.time()
        if how == "sigterm":
            first.send_signal(signal.SIGTERM)
        else:
            asyncio.run(_drain(url, "first"))
        _until("the second worker's first step",
               lambda: any(pid != first.pid and at > asked for at, pid in _steps(steps)))
        taken = min(at for at, pid in _steps(steps) if pid != first.pid and at > asked)
        first.wait(DEADLINE)
        return taken - asked
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    dbs = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    if "postgres" in dbs and (why := runner.pg_available()):
        print(f"skipping PostgreSQL: {why}")
        dbs.remove("postgres")
    print("| store | stop | ask → other worker's first step: median (max) | target |\n"
          "|---|---|---|---|")
    with runner.scratch_dir() as scratch:
        for db in dbs:
            for how in ("sigterm", "drain"):
                seconds = []
                for _ in range(args.reps):
                    with runner.fresh_database(db, scratch) as url:
                        seconds.append(once(url, scratch, how))
                median = statistics.median(seconds)
                print(f"| {db} | {'SIGTERM' if how == 'sigterm' else 'stead workers drain'} "
                      f"| {median * 1000:.0f} ms ({max(seconds) * 1000:.0f} ms) "
                      f"| < 1 s: {'met' if median < 1.0 else 'missed'} |", flush=True)


if __name__ == "__main__":
    main()
