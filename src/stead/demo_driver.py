"""`stead demo`: a run survives a real crash, with real processes.

1. start a `triage` run (see `stead.demo`) in a fresh SQLite database;
2. worker process A runs it; mid-step it is SIGKILLed (no cleanup, no release);
3. worker process B waits out A's lease, takes the run over (epoch 2),
   replays the journal and finishes it; then it is stopped with SIGTERM;
4. print the timeline and the resume record, and check the invariants.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import re
import signal
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path

from stead import demo, records, timeline
from stead.client import Client, RunInfo
from stead.store import open_store

Echo = Callable[[str], None]
LEASE = 1.0
DEADLINE = 30.0
_STAMP = re.compile(r"^\d{4}-\d\d-\d\d ")


class Checks:
    def __init__(self, echo: Echo) -> None:
        self.echo = echo
        self.results: list[tuple[bool, str]] = []

    def check(self, ok: bool, what: str) -> None:
        self.results.append((ok, what))

    def report(self) -> bool:
        self.echo("checks")
        for ok, what in self.results:
            self.echo(f"  [{'ok' if ok else 'FAIL'}] {what}")
        failed = sum(1 for ok, _ in self.results if not ok)
        if failed:
            self.echo(f"\n{failed} of {len(self.results)} checks FAILED")
        else:
            self.echo(f"\nall {len(self.results)} checks passed")
        return failed == 0


class WorkerProcess:
    """`python -m stead worker stead.demo:app` with its output relayed, prefixed."""

    def __init__(self, label: str, proc: asyncio.subprocess.Process, relay: asyncio.Task[None]):
        self.label = label
        self.proc = proc
        self.relay = relay

    @classmethod
    async def spawn(cls, label: str, db: str, root: Path, echo: Echo) -> WorkerProcess:
        package_parent = str(Path(demo.__file__).resolve().parent.parent)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_parent, env.get("PYTHONPATH", "")) if p
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "stead", "--db", db, "worker", "stead.demo:app",
            "--lease", str(LEASE), "--poll", "0.1", "--worker-id", f"worker-{label}",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL, cwd=root, env=env,
        )
        assert proc.stdout is not None
        relay = asyncio.create_task(_relay(proc.stdout, root / f"worker-{label}.log", label, echo))
        return cls(label, proc, relay)

    async def wait(self, timeout: float) -> int | None:
        """The exit code (negative: killed by that signal), or None on timeout."""
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            return None
        await self.relay
        return code

    async def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        await self.proc.wait()
        await self.relay


async def _relay(stream: asyncio.StreamReader, log: Path, label: str, echo: Echo) -> None:
    with open(log, "a", encoding="utf-8") as out:
        while line := await stream.readline():
            text = line.decode(errors="replace").rstrip()
            out.write(text + "\n")
            echo(f"    {label} | {_STAMP.sub('', text)}")


async def _wait_until_done(client: Client, run_id: str, timeout: float) -> RunInfo:
    deadline = time.monotonic() + timeout
    while True:
        info = await client.get(run_id)
        settled = info.status not in (records.PENDING, records.RUNNING)
        if settled or time.monotonic() > deadline:
            return info
        await asyncio.sleep(0.05)


def _label(rec: records.Record) -> str:
    return rec.kind if rec.kind == rec.name else f"{rec.kind} {rec.name}"


def _calls(workdir: Path) -> collections.Counter[tuple[str, str]]:
    path = workdir / demo.CALLS_LOG
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return collections.Counter((ln.split()[0], ln.split()[1]) for ln in lines if ln.strip())


async def run_demo(keep: Path | None, *, echo: Echo) -> bool:
    """Run the demo in `keep` (kept afterwards) or a temporary folder; True if
    every check passed."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        return await _demo(keep.resolve(), echo, kept=True)
    with tempfile.TemporaryDirectory(prefix="stead-demo-") as tmp:
        return await _demo(Path(tmp).resolve(), echo, kept=False)


async def _demo(root: Path, echo: Echo, *, kept: bool) -> bool:
    db = "sqlite:///" + urllib.parse.quote(str(root / "stead.db"))
    workdir = root / f"work-{uuid.uuid4().hex[:8]}"
    workdir.mkdir()
    echo("stead demo: a ticket-triage run survives a worker crash (SIGKILL) and resumes.")
    echo(f"  folder    {root}{'' if kept else ' (temporary)'}")
    echo(f"  database  {db}\n")
    store = await open_store(db)
    workers: list[WorkerProcess] = []
    try:
        client = Client(store, demo.app)
        ok, run_id = await _scenario(client, db, root, workdir, workers, echo)
    finally:
        for w in workers:
            await w.kill()
        await store.close()
    if run_id is not None:
        if kept:
            echo("\nexplore it afterwards:")
            echo(f"  stead --db {db} runs show {run_id}")
            echo(f"  stead --db {db} runs ls")
            echo(f"  worker logs: {root / 'worker-A.log'}, {root / 'worker-B.log'}")
        else:
            echo("\nthe database was in a temporary folder and is gone; "
                 "run `stead demo --keep DIR` to explore it afterwards with `stead runs show`")
    return ok


async def _scenario(client: Client, db: str, root: Path, workdir: Path,
                    workers: list[WorkerProcess], echo: Echo) -> tuple[bool, str | None]:
    checks = Checks(echo)
    task_id = f"ticket-{demo.TICKET['id']}"
    info = await client.start(demo.triage, demo.TICKET, str(workdir), "draft_reply",
                              task_id=task_id)
    if not info.created:
        echo(f"a live run {info.run_id} of {task_id} is left from an earlier demo in this "
             f"folder; cancel it (stead --db {db} runs cancel {info.run_id}) or use a new folder")
        return False, None
    run_id = info.run_id
    echo(f"[1] started run {run_id} (triage@1, task {task_id})")

    echo(f"[2] worker A starts (lease {LEASE:g}s) and runs it")
    a = await WorkerProcess.spawn("A", db, root, echo)
    workers.append(a)
    code_a = await a.wait(DEADLINE)
    before = await client.journal(run_id)
    crashed = code_a == -signal.SIGKILL
    checks.check(crashed, f"worker A was killed by SIGKILL mid-step (exit {code_a})")
    echo(f"[3] worker A is dead ({'SIGKILL' if crashed else f'exit {code_a}'}); the journal "
         f"holds {len(before)} acknowledged record(s): "
         + (", ".join(_label(r) for r in before) or "none"))
    echo(f"    its lease on the run expires within {LEASE:g}s; nobody released it")

    echo("[4] worker B starts, waits out the lease and takes the run over (epoch 2); it "
         "replays the journal, so those records are reused, not called again")
    b = await WorkerProcess.spawn("B", db, root, echo)
    workers.append(b)
    info = await _wait_until_done(client, run_id, DEADLINE)
    echo(f"[5] run {info.status}; stopping worker B with SIGTERM")
    b.proc.send_signal(signal.SIGTERM)
    code_b = await b.wait(DEADLINE)

    journal = await client.journal(run_id)
    resumes = await client.resumes(run_id)
    echo("\n" + timeline.render_run(info, journal, resumes) + "\n")

    calls = _calls(workdir)
    expected = demo.expected_result(demo.TICKET)
    checks.check(info.status == records.COMPLETED and info.result == expected,
                 f"the run completed with the expected result ({info.status})")
    checks.check(calls["asked", "classify"] == 1,
                 f"the model was asked once: the resumed run reused its recorded answer "
                 f"(asked {calls['asked', 'classify']} time(s))")
    steps = [r.name for r in journal if r.kind == records.STEP and r.status == records.OK]
    counts = {name: calls["done", name] for name in steps}
    checks.check(bool(steps) and all(n == 1 for n in counts.values()),
                 f"each journaled step ran to completion exactly once {counts}")
    early = [r.name for r in before if r.kind == records.STEP]
    checks.check(bool(early) and all(calls["start", n] == 1 for n in early),
                 f"steps journaled before the crash were not called again ({', '.join(early)})")
    checks.check(calls["start", "draft_reply"] == 2 and calls["done", "draft_reply"] == 1,
                 "the step the crash interrupted (draft_reply) was never acknowledged, so it "
                 "ran again, once")
    resume_ok = (
        len(resumes) == 1 and resumes[0].epoch == 2 and resumes[0].worker_id == "worker-B"
        and resumes[0].from_seq == len(before) and resumes[0].reused == len(before) > 0
    )
    checks.check(resume_ok, f"one takeover: worker B at epoch 2 resumed from seq {len(before)}, "
                            f"reusing {len(before)} record(s)")
    checks.check(code_b == 0, f"worker B stopped cleanly on SIGTERM (exit {code_b})")
    return checks.report(), run_id
