"""What every demo story shares: its folder and database, real worker
processes (`python -m stead worker MODULE:APP`), and waiting for something to
become true with a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import sys
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import stead
from stead.examples import services

Echo = Callable[[str], None]
LEASE = 1.0  # short, so a takeover after a SIGKILL happens within the demo
DEADLINE = 30.0  # generous: a slow machine must not fail the demo, a hang still does
_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")


class DemoFailed(Exception):
    """Something the story needs did not happen in time."""


@dataclasses.dataclass
class Stage:
    """The folder a story runs in: its database, the fake services' files and
    the worker processes it started."""

    root: Path
    echo: Echo
    kept: bool
    workers: list[WorkerProcess] = dataclasses.field(default_factory=list)

    @property
    def db(self) -> str:
        return "sqlite:///" + urllib.parse.quote(str(self.root / "stead.db"))

    @property
    def services(self) -> Path:
        return self.root / "services"

    async def worker(self, label: str, app: str, *, relay: bool = False,
                     cwd: Path | None = None, env: Mapping[str, str] | None = None,
                     ) -> WorkerProcess:
        """A worker process in the stage's folder (or `cwd`: its machine), with
        `env` added to its environment."""
        w = await WorkerProcess.spawn(self, label, app, relay=relay, cwd=cwd, env=env)
        self.workers.append(w)
        return w

    async def stop_all(self) -> None:
        for w in self.workers:
            await w.kill()

    def log_tails(self, lines: int = 15) -> list[str]:
        out = []
        for w in self.workers:
            text = w.log.read_text(errors="replace").splitlines() if w.log.exists() else []
            out += [f"-- last lines of {w.log.name} --", *text[-lines:]]
        return out


class WorkerProcess:
    """`python -m stead worker APP` in the stage's folder, its output in
    `worker-LABEL.log` (and echoed, prefixed, with `relay`)."""

    def __init__(self, label: str, proc: asyncio.subprocess.Process, log: Path,
                 relay: asyncio.Task[None]) -> None:
        self.label = label
        self.proc = proc
        self.log = log
        self.relay = relay

    @property
    def worker_id(self) -> str:
        return f"worker-{self.label}"

    @classmethod
    async def spawn(cls, stage: Stage, label: str, app: str, *, relay: bool,
                    cwd: Path | None = None, env: Mapping[str, str] | None = None,
                    ) -> WorkerProcess:
        package_parent = str(Path(stead.__file__).resolve().parent.parent)
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        env[services.ENV] = str(stage.services)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "stead", "--db", stage.db, "worker", app,
            "--lease", str(LEASE), "--poll", "0.1", "--worker-id", f"worker-{label}",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL, cwd=cwd or stage.root, env=env,
        )
        assert proc.stdout is not None
        log = stage.root / f"worker-{label}.log"
        echo = stage.echo if relay else None
        task = asyncio.create_task(_relay(proc.stdout, log, label, echo))
        return cls(label, proc, log, task)

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def wait(self, timeout: float = DEADLINE) -> int | None:
        """The exit code (negative: killed by that signal), or None on timeout."""
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            return None
        await self.relay
        return code

    async def signal(self, sig: int) -> int | None:
        """Send `sig` and wait for the process to end."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
        return await self.wait()

    async def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        await self.proc.wait()
        await self.relay


async def _relay(stream: asyncio.StreamReader, log: Path, label: str,
                 echo: Echo | None) -> None:
    with open(log, "a", encoding="utf-8") as out:
        while line := await stream.readline():
            text = line.decode(errors="replace").rstrip()
            out.write(text + "\n")
            out.flush()
            if echo is not None:
                echo(f"    {label} | {_STAMP.sub('', text)}")


async def until(what: str, check: Callable[[], Awaitable[bool]],
                *, every: Callable[[], Awaitable[None]] | None = None,
                timeout: float = DEADLINE) -> None:
    """Poll `check` (calling `every` first, e.g. to print progress) until it is
    true; raise `DemoFailed` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if every is not None:
            await every()
        if await check():
            return
        if time.monotonic() > deadline:
            raise DemoFailed(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.05)
