"""`stead demo triage`: a run survives a worker killed mid-step.

1. start a `triage` run (see `triage_app.py`) in a fresh SQLite database;
2. worker process A runs it; mid-step it SIGKILLs itself (no cleanup, no release);
3. worker process B waits out A's lease, takes the run over (epoch 2),
   replays the journal and finishes it; then it is stopped with SIGTERM;
4. print the timeline and the resume record, and check the invariants.
"""

from __future__ import annotations

import collections
import signal
import time
from pathlib import Path

from stead import records
from stead.client import Client, RunInfo
from stead.demos import triage_app
from stead.demos.narrate import Checks
from stead.demos.procs import DEADLINE, LEASE, DemoFailed, Stage, until
from stead.records import RecordKind, RecordStatus, RunStatus
from stead.store import open_store
from stead.views import timeline

APP = "stead.demos.triage_app:app"


def _label(rec: records.Record) -> str:
    return rec.kind if rec.kind == rec.name else f"{rec.kind} {rec.name}"


def _calls(workdir: Path) -> collections.Counter[tuple[str, str]]:
    path = workdir / triage_app.CALLS_LOG
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return collections.Counter((ln.split()[0], ln.split()[1]) for ln in lines if ln.strip())


async def tell(stage: Stage) -> tuple[bool, str | None]:
    stage.echo("stead demo triage: a ticket-triage run survives a worker crash (SIGKILL) "
               "and resumes.")
    stage.echo(f"  folder    {stage.root}{'' if stage.kept else ' (temporary)'}")
    stage.echo(f"  database  {stage.db}\n")
    workdir = stage.root / "work"
    workdir.mkdir()
    store = await open_store(stage.db)
    try:
        return await _story(stage, Client(store, triage_app.app), workdir)
    finally:
        await store.close()


async def _story(stage: Stage, client: Client, workdir: Path) -> tuple[bool, str | None]:
    echo, checks = stage.echo, Checks(stage.echo)
    task_id = f"ticket-{triage_app.TICKET['id']}"
    info = await client.start(triage_app.triage, triage_app.TICKET, str(workdir),
                              "draft_reply", task_id=task_id)
    run_id = info.run_id
    echo(f"[1] started run {run_id} (triage@1, task {task_id})")

    echo(f"[2] worker A starts (lease {LEASE:g}s) and runs it")
    a = await stage.worker("A", APP, relay=True)
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
    b = await stage.worker("B", APP, relay=True)
    started = time.monotonic()

    async def settled() -> bool:
        return (await client.get(run_id)).status not in (RunStatus.PENDING, RunStatus.RUNNING)

    try:
        await until("worker B to finish the run", settled)
    except DemoFailed:
        checks.check(False, f"the run finished within {time.monotonic() - started:.0f}s")
    info = await client.get(run_id)
    echo(f"[5] run {info.status}; stopping worker B with SIGTERM")
    code_b = await b.signal(signal.SIGTERM)

    journal = await client.journal(run_id)
    resumes = await client.resumes(run_id)
    echo("\n" + timeline.render_run(info, journal, resumes) + "\n")
    _checks(checks, info, journal, resumes, before, _calls(workdir), code_b)
    return checks.report(), run_id


def _checks(checks: Checks, info: RunInfo, journal: list[records.Record],
            resumes: list[records.ResumeRecord], before: list[records.Record],
            calls: collections.Counter[tuple[str, str]], code_b: int | None) -> None:
    expected = triage_app.expected_result(triage_app.TICKET)
    checks.check(info.status == RunStatus.COMPLETED and info.result == expected,
                 f"the run completed with the expected result ({info.status})")
    checks.check(calls["asked", "classify"] == 1,
                 f"the model was asked once: the resumed run reused its recorded answer "
                 f"(asked {calls['asked', 'classify']} time(s))")
    steps = [r.name for r in journal if r.kind == RecordKind.STEP and r.status == RecordStatus.OK]
    counts = {name: calls["done", name] for name in steps}
    checks.check(bool(steps) and all(n == 1 for n in counts.values()),
                 f"each journaled step ran to completion exactly once {counts}")
    early = [r.name for r in before if r.kind == RecordKind.STEP]
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
