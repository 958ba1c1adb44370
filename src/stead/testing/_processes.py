"""The crash matrix's worker processes: started ahead, given their orders
when a point needs one, stopped, killed, and read after.

A process is started before it is needed and imports stead while the current
point runs; its orders (see `stead.testing._worker_process`) reach it on
stdin, so the database URL never shows in `ps`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

Process = subprocess.Popen[bytes]


class WorkerProcesses:
    """Worker processes for the app `spec` on the database at `url`."""

    def __init__(self, spec: str, url: str, root: Path) -> None:
        self.spec, self.url, self.root = spec, url, root
        # The children import what this process imports, from wherever they run.
        self.pythonpath = os.pathsep.join(dict.fromkeys(
            os.path.abspath(p or os.getcwd()) for p in sys.path))
        self._ready: list[Process] = []

    def start(self, folder: Path, label: str, env: Mapping[str, str], *, lease: float,
              crash: str | None = None, tally: Path | None = None) -> Process:
        """A worker in `folder` (its cwd, where its log `worker-LABEL.log`
        goes), dying at `crash`, writing its journal writes to `tally` when
        stopped."""
        proc = self._ready.pop() if self._ready else self._launch()
        self._ready.append(self._launch())  # the next one warms up while this one works
        orders = {"app": self.spec, "db": self.url, "cwd": str(folder), "env": dict(env),
                  "log": str(folder / f"worker-{label}.log"), "crash": crash,
                  "tally": None if tally is None else str(tally), "lease": lease,
                  "worker_id": label}
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it died starting: its exit code tells
            proc.stdin.write(json.dumps(orders).encode() + b"\n")
            proc.stdin.close()
        return proc

    def _launch(self) -> Process:
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=self.pythonpath)
        with open(self.root / "workers.log", "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "stead.testing._worker_process"], cwd=self.root,
                env=env, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT)

    def close(self) -> None:
        """Let the processes started for later go: an empty stdin ends them."""
        for proc in self._ready:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
        self._ready.clear()


async def stop(proc: Process, timeout: float) -> None:
    """SIGTERM: the worker stops gracefully (and writes its tally); SIGKILL
    if it has not after `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    if await exit_code(proc, timeout) is None:
        await kill(proc)


async def kill(proc: Process) -> None:
    if proc.poll() is None:
        proc.kill()
    while proc.poll() is None:
        await asyncio.sleep(0.01)


async def exit_code(proc: Process, timeout: float) -> int | None:
    """The process's exit code (negative: the signal that ended it), or None
    if it still runs after `timeout` seconds."""
    until = time.monotonic() + timeout
    while (code := proc.poll()) is None:
        if time.monotonic() > until:
            return None
        await asyncio.sleep(0.01)
    return code


def tail(log: Path, lines: int = 20) -> str:
    text = log.read_text(errors="replace").splitlines() if log.exists() else []
    return "\n".join(text[-lines:])
