"""A real worker process for the schedule tests: an app with one schedule
firing every second (missed ticks: all), on a clock the test moves.

    python schedule_worker.py --db URL --clock FILE --ticks FILE

The clock is the system's plus the offset (seconds) written in FILE, read
again at most every 20 ms, so the test jumps every worker's clock at once.
Each tick's run appends the tick to the ticks file from a step (journaled:
once per run). SIGTERM stops the worker gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

import stead

app = stead.App("schedule-tests")


class _Config:
    ticks: Path


CONFIG = _Config()


class FileClock:
    """The system clock moved by the offset in a file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0.0
        self._read_at = 0.0

    def now(self) -> float:
        real = time.time()
        if real - self._read_at > 0.02:
            # Being rewritten: keep the last offset.
            with contextlib.suppress(OSError, ValueError):
                self._offset = float(self.path.read_text() or 0)
            self._read_at = real
        return real + self._offset


def note(tick: str) -> str:
    fd = os.open(CONFIG.ticks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (tick + "\n").encode())
    finally:
        os.close(fd)
    return tick


@app.schedule("* * * * * *", missed="all")
async def every_second(run: stead.Run, tick: str) -> str:
    return await run.step("note", note, tick)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--clock", required=True, type=Path)
    p.add_argument("--ticks", required=True, type=Path)
    args = p.parse_args()
    CONFIG.ticks = args.ticks
    clock = FileClock(args.clock)
    store = await stead.open_store(args.db, clock=clock)
    # The lease outlasts the test's 40 s jump forward: a lease taken just before the
    # jump (or computed just before it and committed after) would otherwise look
    # expired to the other workers, which would rightly take the run over and run
    # its step again; here each tick's step must run once.
    worker = stead.Worker(app, store, stead.WorkerOptions(
        lease_seconds=60.0, poll_interval=0.05, shutdown_grace=5.0), clock=clock)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    print("ready", flush=True)
    try:
        await worker.run()
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
