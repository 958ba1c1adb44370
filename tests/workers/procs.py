"""Starting, watching and reading after real worker processes (crash_worker.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import stead
from stead.testing import CrashingStore, CrashPoint
from tests import stress

SCRIPT = Path(__file__).with_name("crash_worker.py")
SLOW = stress.slow()  # every deadline the process tests wait on scales by it
DEADLINE = 30.0 * SLOW  # generous: a slow CI box must not fail these, a hang still does


@dataclasses.dataclass
class Workers:
    """The files a test shares with its worker processes, and the processes."""

    tmp: Path
    url: str | None = None  # the store the workers share; by default SQLite in `tmp`
    procs: list[tuple[subprocess.Popen[bytes], Path]] = dataclasses.field(default_factory=list)

    @property
    def db_url(self) -> str:
        return self.url or f"sqlite:///{self.tmp}/stead.db"

    @property
    def counter(self) -> Path:
        return self.tmp / "steps.log"

    @property
    def model_log(self) -> Path:
        return self.tmp / "model.log"

    @property
    def events(self) -> Path:
        return self.tmp / "events.log"

    @property
    def gate(self) -> Path:
        return self.tmp / "gate"

    def open_gate(self) -> None:
        self.gate.touch()

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        log = self.tmp / f"worker-{len(self.procs)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(SCRIPT), "--db", self.db_url,
                 "--counter", str(self.counter), "--model-log", str(self.model_log),
                 "--events", str(self.events), "--gate", str(self.gate), *args],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.procs.append((proc, log))
        return proc

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        for p, log in self.procs:
            if p is proc:
                return log.read_text(errors="replace")[-4000:]
        return ""

    async def exit_code(self, proc: subprocess.Popen[bytes], timeout: float = DEADLINE) -> int:
        """Wait for the process to end (polling, never blocking the loop)."""
        deadline = time.monotonic() + timeout
        while (code := proc.poll()) is None:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise AssertionError(
                    f"worker {proc.pid} did not exit in {timeout}s:\n{self.output(proc)}"
                )
            await asyncio.sleep(0.02)
        return code

    def stop_all(self) -> None:
        for proc, _log in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()

    def steps(self) -> Counter[str]:
        """How often each step ran, over every process: "<run_id> <step>" -> n."""
        return Counter(_lines(self.counter))

    def step_names(self, run_id: str) -> Counter[str]:
        prefix = f"{run_id} "
        return Counter(
            line[len(prefix):] for line in _lines(self.counter) if line.startswith(prefix)
        )

    def model_calls(self) -> int:
        return len(_lines(self.model_log))

    def claims(self) -> list[tuple[str, int]]:
        """Every claim any worker made, as (run_id, epoch), from the events file."""
        found = []
        for line in _lines(self.events):
            if line.startswith("claim "):
                _claim, _worker, run_id, epoch = line.split()
                found.append((run_id, int(epoch)))
        return found

    def saw(self, text: str) -> bool:
        return any(line.startswith(text) for line in _lines(self.events))


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def wait_until(
    what: str, pred: Callable[[], Awaitable[bool] | bool], timeout: float = DEADLINE
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if not isinstance(value, bool):
            value = await value
        if value:
            return
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.02)


def check_journal(journal: list[stead.Record]) -> None:
    """Gapless seqs from 0, and each call address journaled once per attempt
    (besides the attempt's started marker, when a commit carried it, and a
    wait's record of opening, which its outcome follows at its address)."""
    assert [r.seq for r in journal] == list(range(len(journal)))
    positions = [(r.addr, r.attempt) for r in journal if r.status not in ("started", "open")]
    assert len(positions) == len(set(positions)), positions


KILLED = -signal.SIGKILL


async def drain(app: stead.App, db_url: str, point: CrashPoint | None = None) -> None:
    """Run a worker of `app` until nothing is left to do, SIGKILLed at
    `point` if given (a crashed worker's lease is waited out: 1 second)."""
    inner = await stead.open_store(db_url)
    store: stead.Store = inner if point is None else CrashingStore(inner, point)
    worker = stead.Worker(app, store, stead.WorkerOptions(lease_seconds=1.0, poll_interval=0.05))
    try:
        await worker.run_until_idle()
    finally:
        await inner.close()
