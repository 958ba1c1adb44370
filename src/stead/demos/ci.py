"""`stead demo ci`: a coding agent's CI job survives the SIGKILL of its worker.

1. worker A runs the agent (`stead.examples.ci_agent`): it reads the sample
   repository, the model plans a fix, the file is edited, and the CI job is
   submitted as an effect that journals CI's job id (471) on acceptance;
2. worker A is SIGKILLed while CI runs the job;
3. worker B takes the run over: the journal says `run_ci` was accepted as job
   471 with no result (pending_external), so B asks CI about job 471 (the
   effect's `check`), and does not submit again;
4. CI finishes job 471 (the demo plays CI's runner); B records the result;
5. the timeline, the resume record, CI's own ledger, checks.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from stead import records, timeline
from stead.client import Client, RunInfo
from stead.demos.narrate import Checks, Tail, compact, resume_lines
from stead.demos.procs import Stage, WorkerProcess, until
from stead.examples import ci_agent, services
from stead.records import RecordStatus, ResumeClass, RunStatus
from stead.store import open_store

APP = "stead.examples.ci_agent:app"
JOB = services.CI.FIRST_JOB


async def tell(stage: Stage) -> tuple[bool, str | None]:
    stage.echo("stead demo ci: a coding agent's CI job survives the SIGKILL of its worker; "
               "no second job is submitted.")
    stage.echo(f"  folder    {stage.root}{'' if stage.kept else ' (temporary)'}")
    stage.echo(f"  database  {stage.db}")
    stage.echo(f"  services  {stage.services} (the fake CI service, model)\n")
    repo = ci_agent.make_sample_repo(stage.root / "repo")
    services.CI(stage.services).configure(runs_for=None)  # jobs end when the demo says so
    store = await open_store(stage.db)
    try:
        return await _story(stage, Client(store, ci_agent.app), repo)
    finally:
        await store.close()


async def _story(stage: Stage, client: Client, repo: Path) -> tuple[bool, str | None]:
    echo, checks = stage.echo, Checks(stage.echo)
    ci = services.CI(stage.services)
    info = await client.start(ci_agent.fix_and_test, str(repo), "add() subtracts",
                              task_id="fix-add")
    run_id = info.run_id
    tail = Tail(client, run_id, echo)
    echo(f"[1] the repository {repo.name}/: calc.py's add() returns a - b")
    a = await stage.worker("A", APP)
    tail.labels[1] = "A"
    echo(f"    run {run_id} (fix_and_test@1); worker A (pid {a.pid}) claims it:")

    async def accepted() -> bool:
        return any(r.name == "run_ci" and r.status == RecordStatus.ACCEPTED
                   for r in await client.journal(run_id))

    await until(f"CI to accept job {JOB}", accepted, every=tail.pump)
    echo(f"    CI is running job {JOB}; worker A polls it")

    echo(f"[2] worker A is killed (SIGKILL) while CI runs job {JOB}")
    code_a = await a.signal(signal.SIGKILL)
    at_kill = await client.journal(run_id)
    echo(f"    worker A is gone (exit {code_a}); the journal ends with run_ci accepted as "
         f"job {JOB}")

    echo("[3] worker B starts, waits out A's lease and takes the run over (epoch 2); run_ci")
    echo(f"    is pending outside, so B asks CI about job {JOB} and never submits again")
    b = await stage.worker("B", APP)
    tail.labels[2] = "B"

    async def b_asked() -> bool:
        return bool(_calls_by(ci, b, "status"))

    await until(f"worker B to ask CI about job {JOB}", b_asked, every=tail.pump)
    echo(f"    B asked CI about job {JOB}: pending")
    echo(f"[4] CI finishes job {JOB}: passed")
    ci.finish(JOB, "passed")

    async def settled() -> bool:
        return (await client.get(run_id)).status not in (RunStatus.PENDING, RunStatus.RUNNING)

    await until("the run to finish", settled, every=tail.pump)
    info = await client.get(run_id)
    echo(f"    run {info.status}: {compact(info.result)}")
    code_b = await b.signal(signal.SIGTERM)

    journal = await client.journal(run_id)
    resumes = await client.resumes(run_id)
    echo("[5] the record\n")
    echo(timeline.render_run(info, journal, resumes) + "\n")
    for line in resume_lines(resumes[0], journal) if resumes else []:
        echo(line)
    echo(f"\nthe CI service's own ledger ({stage.services / 'ci.json'})")
    for w in stage.workers:
        mine = [c for c in ci.calls() if c["pid"] == w.pid]
        for c in mine:
            if c["op"] == "submit":
                echo(f"  submit  commit {c['commit']}  key {c['key']}  -> job {c['job']}  "
                     f"from {w.worker_id}")
        polls = [c["job"] for c in mine if c["op"] == "status"]
        if polls:
            echo(f"  status  job {', '.join(map(str, sorted(set(polls))))}  asked "
                 f"{len(polls)} time(s)  from {w.worker_id}")
    jobs = ci.jobs()
    echo(f"  {len(jobs)} job(s): " + ", ".join(f"{j} {e['status']}" for j, e in jobs.items()))
    fixed = [ln.strip() for ln in (repo / "calc.py").read_text().splitlines() if "return" in ln]
    echo(f"\nthe repository: calc.py now says {' / '.join(fixed)}\n")

    _checks(checks, stage, ci, info, at_kill, journal, resumes, code_a, code_b, repo)
    return checks.report(), run_id


def _calls_by(ci: services.CI, w: WorkerProcess, op: str) -> list[dict[str, Any]]:
    return [c for c in ci.calls() if c["pid"] == w.pid and c["op"] == op]


def _checks(checks: Checks, stage: Stage, ci: services.CI, info: RunInfo,
            at_kill: list[records.Record], journal: list[records.Record],
            resumes: list[records.ResumeRecord], code_a: int | None, code_b: int | None,
            repo: Path) -> None:
    a, b = stage.workers[0], stage.workers[1]
    last = [r for r in at_kill if r.name == "run_ci"][-1:]
    checks.check(code_a == -signal.SIGKILL and [r.status for r in last] == [RecordStatus.ACCEPTED],
                 f"worker A was killed by SIGKILL while CI ran job {JOB} (exit {code_a}); the "
                 "journal held its id and no result")
    asked = services.ModelCalls(stage.services).calls()
    checks.check(len(asked) == 1 and asked[0]["pid"] == a.pid,
                 f"the model was asked once, by worker A (asked {len(asked)} time(s))")
    edits = [r for r in journal if r.name == "edit_file"]
    fixed = (repo / "calc.py").read_text()
    checks.check(len(edits) == 1 and edits[0].epoch == 1 and "return a + b" in fixed
                 and "return a - b" not in fixed,
                 "calc.py was edited once, by worker A; worker B did not redo it")
    submits = [c for c in ci.calls() if c["op"] == "submit"]
    checks.check(len(submits) == 1 and submits[0]["pid"] == a.pid and list(ci.jobs()) == [JOB],
                 f"CI got one job ({', '.join(map(str, ci.jobs())) or 'none'}), submitted by "
                 "worker A: no second job")
    b_polls = [c["job"] for c in _calls_by(ci, b, "status")]
    checks.check(bool(b_polls) and set(b_polls) == {JOB},
                 f"worker B asked CI about job {JOB} ({len(b_polls)} time(s)) and nothing else")
    classes = dict(resumes[0].details.classes) if resumes else {}
    checks.check(len(resumes) == 1 and resumes[0].worker_id == "worker-B"
                 and resumes[0].epoch == 2 and classes.get(ResumeClass.PENDING_EXTERNAL) == 1,
                 "one takeover: worker B at epoch 2 classified run_ci as pending_external "
                 f"({classes})")
    result = info.result if isinstance(info.result, dict) else {}
    checks.check(info.status == RunStatus.COMPLETED and result.get("ci_job") == JOB
                 and result.get("ci") == "passed",
                 f"the run completed with CI job {JOB} passed ({info.status})")
    checks.check(code_b == 0, f"worker B stopped cleanly on SIGTERM (exit {code_b})")
