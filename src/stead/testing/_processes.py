"""The crash matrix's worker processes: forked from a warm server when a
point needs one, stopped, killed, and read after.

The server (`stead.testing._worker_process`) is started with the matrix and
imports stead (and the libraries the matrix was asked to preload) while the
reference run is readied; each worker is a fork of it, so a point pays
neither an interpreter's start nor those imports. The app itself each worker
imports once the point's cwd and environment are set, which an app may read
as it loads. Orders reach the server on stdin, so the database URL never
shows in `ps`; it reports each worker's pid and, once reaped, its exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from stead import errors

# `-m stead.testing._worker_process` would run a second copy of a module the
# package has imported already (and runpy warns of it).
_ENTRY = "from stead.testing._worker_process import main; main()"
# How long a fork's pid may take to be reported: the server imports what it
# preloads first (seconds), then forks in milliseconds.
_STARTED_WITHIN = 120.0


class Process:
    """One forked worker: its pid, and its exit code once the server reaped it."""

    def __init__(self, server: WorkerProcesses, pid: int) -> None:
        self.server, self.pid = server, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.collect()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it died just now
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WorkerProcesses:
    """Worker processes for the app `spec` on the database at `url`, forked
    from a server that imported the modules `preload` names."""

    def __init__(self, spec: str, url: str, root: Path, preload: Sequence[str] = ()) -> None:
        self.spec, self.url, self.root = spec, url, root
        # The workers import what this process imports, from wherever they run.
        pythonpath = os.pathsep.join(dict.fromkeys(
            os.path.abspath(p or os.getcwd()) for p in sys.path))
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=pythonpath)
        with open(root / "workers.log", "ab") as log:
            self._server = subprocess.Popen(
                [sys.executable, "-c", _ENTRY, *preload], cwd=root, env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
        assert self._server.stdin is not None and self._server.stdout is not None
        self._reports = self._server.stdout.fileno()
        os.set_blocking(self._reports, False)
        self._pending = b""
        self._started: list[Process] = []  # forked, not yet handed out by `start`
        self._workers: dict[int, Process] = {}  # forked, not yet reaped

    def start(self, folder: Path, label: str, env: Mapping[str, str], *, lease: float,
              crash: str | None = None, tally: Path | None = None) -> Process:
        """A worker in `folder` (its cwd, where its log `worker-LABEL.log`
        goes), dying at `crash`, writing its journal writes to `tally` when
        stopped."""
        orders = {"app": self.spec, "db": self.url, "cwd": str(folder), "env": dict(env),
                  "log": str(folder / f"worker-{label}.log"), "crash": crash,
                  "tally": None if tally is None else str(tally), "lease": lease,
                  "worker_id": label}
        assert self._server.stdin is not None
        try:
            self._server.stdin.write(json.dumps(orders).encode() + b"\n")
            self._server.stdin.flush()
        except BrokenPipeError:
            self._gone()
        until = time.monotonic() + _STARTED_WITHIN
        while not self._started:
            if self._server.poll() is not None or time.monotonic() > until:
                self._gone()
            select.select([self._reports], [], [], 0.05)
            self.collect()
        return self._started.pop(0)

    def collect(self) -> None:
        """Read the server's reports so far."""
        ended = False
        with contextlib.suppress(BlockingIOError):
            while not ended:
                chunk = os.read(self._reports, 65536)
                self._pending += chunk
                ended = not chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            what, number, *code = line.decode().split()
            pid = int(number)
            if what == "started":
                self._workers[pid] = Process(self, pid)
                self._started.append(self._workers[pid])
            else:
                self._workers.pop(pid).returncode = int(code[0])
        # A worker just forked may hold the reports' pipe open a moment more:
        # the server's own exit says it too.
        if ended or self._server.poll() is not None:
            # Nobody is left to reap the workers or say how they ended.
            for pid in self._workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self._gone()

    def _gone(self) -> NoReturn:
        raise errors.SteadError(
            "the crash matrix's worker server ended or did not answer (exit code "
            f"{self._server.poll()}); its log ends:\n{tail(self.root / 'workers.log')}")

    def close(self) -> None:
        """End the server: an empty stdin stops it, killing any worker left."""
        assert self._server.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self._server.stdin.close()
        try:
            self._server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()
        if self._server.stdout is not None:
            self._server.stdout.close()


async def stop(proc: Process, timeout: float) -> None:
    """SIGTERM: the worker stops gracefully (and writes its tally); SIGKILL
    if it has not after `timeout` seconds."""
    proc.send_signal(signal.SIGTERM)
    if await exit_code(proc, timeout) is None:
        await kill(proc)


async def kill(proc: Process) -> None:
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
