"""`stead demo ci`: a coding agent's files and CI job survive the SIGKILL of its
worker, and its test result stays bound to the environment it was made in.

1. worker A, on "machine A" (its own folder), runs the agent
   (`stead.examples.ci_agent`): the repository is attached as a workspace,
   the model plans a fix, calc.py is edited (the step's commit carries the
   workspace's snapshot: no explicit save), the tests run, and the CI job is submitted as an effect
   that journals CI's job id (471) on acceptance;
2. worker A is SIGKILLed while CI runs the job, and machine A's folder is
   deleted: the repository it edited is gone;
3. worker B, on machine B, takes the run over: it restores the saved tree
   into a fresh folder of its own (hash-equal) before replay, so the edit is
   not redone; the journal says `run_ci` was accepted as job 471 with no
   result (pending_external), so B asks CI about job 471 and does not submit
   again;
4. CI finishes job 471; B records the result;
5. the timeline, the resume record (with the workspace it restored), CI's
   own ledger, the restored tree;
6. a second run, killed after its tests ran, is taken over on machine D,
   whose uv.lock is another: the recorded test result no longer holds
   (revalidate), and the tests run again there before the CI job goes out.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path
from typing import Any

from stead import records
from stead.client import Client, RunInfo
from stead.demos.narrate import Checks, Tail, compact, resume_lines
from stead.demos.procs import Stage, WorkerProcess, until
from stead.examples import ci_agent, services
from stead.records import RecordKind, RecordStatus, ResumeClass, RunStatus
from stead.store import open_store
from stead.views import timeline

APP = "stead.examples.ci_agent:app"
JOB = services.CI.FIRST_JOB
LOCK_1 = "numpy==2.1.0"
LOCK_2 = "numpy==2.2.0"


def machine(stage: Stage, label: str, lock: str) -> Path:
    """A worker's machine: its own folder, with the lockfile of its environment."""
    where = stage.root / f"machine-{label}"
    where.mkdir()
    (where / ci_agent.LOCKFILE).write_text(lock + "\n")
    return where


async def tell(stage: Stage) -> tuple[bool, str | None]:
    stage.echo("stead demo ci: a coding agent's files and CI job survive the SIGKILL of its "
               "worker;\nno edit is redone, no second job is submitted, and a test result "
               "is reused only\nin the environment it was made in.")
    stage.echo(f"  folder    {stage.root}{'' if stage.kept else ' (temporary)'}")
    stage.echo(f"  database  {stage.db}")
    stage.echo(f"  services  {stage.services} (the fake CI service, model, test runs)\n")
    services.CI(stage.services).configure(runs_for=None)  # jobs end when the demo says so
    store = await open_store(stage.db)
    try:
        client = Client(store, ci_agent.app)
        checks = Checks(stage.echo)
        run_id = await _story(stage, client, checks)
        await _lockfile(stage, client, checks)
        return checks.report(), run_id
    finally:
        await store.close()


async def _begin(stage: Stage, client: Client, label: str, task_id: str
                 ) -> tuple[Path, Path, str, Tail]:
    """Machine `label` with the sample repository, and a run started on it."""
    home = machine(stage, label, LOCK_1)
    repo = ci_agent.make_sample_repo(home / "repo")
    info = await client.start(ci_agent.fix_and_test, str(repo), "add() subtracts",
                              task_id=task_id)
    return home, repo, info.run_id, Tail(client, info.run_id, stage.echo)


async def _story(stage: Stage, client: Client, checks: Checks) -> str:
    echo = stage.echo
    ci = services.CI(stage.services)
    home_a, repo, run_id, tail = await _begin(stage, client, "A", "fix-add")
    echo(f"[1] machine-A/{repo.name}/: calc.py's add() returns a - b")
    a = await stage.worker("A", APP, cwd=home_a)
    tail.labels[1] = "A"
    echo(f"    run {run_id} (fix_and_test@1); worker A (pid {a.pid}) claims it:")

    async def accepted() -> bool:
        return any(r.name == "run_ci" and r.status == RecordStatus.ACCEPTED
                   for r in await client.journal(run_id))

    await until(f"CI to accept job {JOB}", accepted, every=tail.pump)
    echo(f"    CI is running job {JOB}; worker A polls it")

    echo(f"[2] worker A is killed (SIGKILL) while CI runs job {JOB}; machine A's folder is "
         "deleted")
    code_a = await a.signal(signal.SIGKILL)
    at_kill = await client.journal(run_id)
    shutil.rmtree(home_a)
    echo(f"    worker A is gone (exit {code_a}), and so is machine-A/repo; the journal ends "
         f"with run_ci accepted as job {JOB}")

    echo("[3] worker B starts on machine B, waits out A's lease and takes the run over "
         "(epoch 2):")
    echo("    it restores the saved tree into a fresh folder of its own before replay; run_ci")
    echo(f"    is pending outside, so B asks CI about job {JOB} and never submits again")
    home_b = machine(stage, "B", LOCK_1)
    b = await stage.worker("B", APP, cwd=home_b)
    tail.labels[2] = "B"

    async def b_asked() -> bool:
        return bool(_calls_by(ci, b, "status"))

    await until(f"worker B to ask CI about job {JOB}", b_asked, every=tail.pump)
    echo(f"    B asked CI about job {JOB}: pending")
    echo(f"[4] CI finishes job {JOB}: passed")
    ci.finish(JOB, "passed")
    info = await _settled(client, run_id, tail)
    echo(f"    run {info.status}: {compact(info.result)}")
    code_b = await b.signal(signal.SIGTERM)

    journal = await client.journal(run_id)
    resumes = await client.resumes(run_id)
    echo("[5] the record\n")
    echo(timeline.render_run(info, journal, resumes) + "\n")
    for line in resume_lines(resumes[0], journal) if resumes else []:
        echo(line)
    restored = dict((resumes[0].details.workspaces or {}).get("repo", {})) if resumes else {}
    if restored:
        echo(f"  restored  workspace repo, snapshot at seq {restored['seq']} (tree "
             f"{str(restored['tree'])[:12]}…, saved by {restored['saved_by']}) into")
        echo(f"            {restored['path']}")
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
    where = Path(str(restored.get("path", home_b)))
    calc = where / "calc.py"
    fixed = [ln.strip() for ln in calc.read_text().splitlines() if "return" in ln] \
        if calc.exists() else ["(missing)"]
    echo(f"\nthe restored repository on machine B: calc.py says {' / '.join(fixed)}\n")

    _checks(checks, stage, ci, info, at_kill, journal, resumes, code_a, code_b, restored,
            home_b)
    return run_id


async def _settled(client: Client, run_id: str, tail: Tail) -> RunInfo:
    async def settled() -> bool:
        return (await client.get(run_id)).status not in (RunStatus.PENDING, RunStatus.RUNNING)

    await until("the run to finish", settled, every=tail.pump)
    return await client.get(run_id)


def _calls_by(ci: services.CI, w: WorkerProcess, op: str) -> list[dict[str, Any]]:
    return [c for c in ci.calls() if c["pid"] == w.pid and c["op"] == op]


def _checks(checks: Checks, stage: Stage, ci: services.CI, info: RunInfo,
            at_kill: list[records.Record], journal: list[records.Record],
            resumes: list[records.ResumeRecord], code_a: int | None, code_b: int | None,
            restored: dict[str, Any], home_b: Path) -> None:
    a, b = stage.workers[0], stage.workers[1]
    last = [r for r in at_kill if r.name == "run_ci"][-1:]
    checks.check(code_a == -signal.SIGKILL and [r.status for r in last] == [RecordStatus.ACCEPTED],
                 f"worker A was killed by SIGKILL while CI ran job {JOB} (exit {code_a}); the "
                 "journal held its id and no result")
    asked = services.ModelCalls(stage.services).calls()
    checks.check([c["pid"] for c in asked] == [a.pid, a.pid],
                 f"the model was asked twice (plan, CI message), both by worker A (asked "
                 f"{len(asked)} time(s))")
    edits = [r for r in journal if r.name == "edit_file" and r.kind == RecordKind.STEP]
    checks.check(len(edits) == 1 and edits[0].epoch == 1,
                 "calc.py was edited once, by worker A; worker B did not redo it")
    snaps = [r for r in journal if r.kind == RecordKind.WORKSPACE and r.digest == "save"]
    path = Path(str(restored.get("path", "")))
    text = (path / "calc.py").read_text() if (path / "calc.py").exists() else ""
    checks.check(bool(snaps) and restored.get("seq") == snaps[-1].seq
                 and home_b in path.parents and "return a + b" in text
                 and "return a - b" not in text,
                 "worker B restored the saved tree (hash-checked) into a fresh folder on "
                 "machine B, edit included, though machine A's copy was deleted")
    checks.check(len(edits) == 1 and [s.seq for s in snaps] == [edits[0].seq + 1],
                 "the edit's snapshot rode in edit_file's own commit: the workflow never "
                 "called ws.save(), and the edit survived")
    submits = [c for c in ci.calls() if c["op"] == "submit"]
    checks.check(len(submits) == 1 and submits[0]["pid"] == a.pid and list(ci.jobs()) == [JOB],
                 f"CI got one job ({', '.join(map(str, ci.jobs())) or 'none'}), submitted by "
                 "worker A: no second job")
    b_polls = [c["job"] for c in _calls_by(ci, b, "status")]
    checks.check(bool(b_polls) and set(b_polls) == {JOB},
                 f"worker B asked CI about job {JOB} ({len(b_polls)} time(s)) and nothing else")
    tests = services.TestRuns(stage.services).calls()
    checks.check([c["pid"] for c in tests] == [a.pid],
                 "the tests ran once, by worker A; B reused the result (same tree, same "
                 "uv.lock)")
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


async def _lockfile(stage: Stage, client: Client, checks: Checks) -> None:
    echo = stage.echo
    provider, ci = services.ModelCalls(stage.services), services.CI(stage.services)
    ci.configure(runs_for=0.3)
    provider.stall("write_message")  # the provider is slow: the run waits after its tests
    home_c, _repo, run_id, tail = await _begin(stage, client, "C", "fix-add-2")
    echo(f"\n[6] a changed lockfile: run {run_id} on machine C ({ci_agent.LOCKFILE}: {LOCK_1})")
    c = await stage.worker("C", APP, cwd=home_c)
    tail.labels[1] = "C"

    async def tested() -> bool:
        return any(x["pid"] == c.pid and x["purpose"] == "write_message"
                   for x in provider.calls())

    await until("worker C to run the tests", tested, every=tail.pump)
    echo("    the tests passed under worker C; it is killed while the model writes the CI "
         "message")
    code_c = await c.signal(signal.SIGKILL)
    shutil.rmtree(home_c)
    provider.stall(None)
    echo(f"    machine D's {ci_agent.LOCKFILE} says {LOCK_2}: the recorded test result was "
         f"made under {LOCK_1}")
    home_d = machine(stage, "D", LOCK_2)
    d = await stage.worker("D", APP, cwd=home_d)
    tail.labels[2] = "D"
    info = await _settled(client, run_id, tail)
    echo(f"    run {info.status}: {compact(info.result)}")
    await d.signal(signal.SIGTERM)
    journal = await client.journal(run_id)
    resumes = await client.resumes(run_id)
    cut = [r for r in journal if r.kind == RecordKind.CUT]
    runs = [(x["pid"], x["lockfile"]) for x in services.TestRuns(stage.services).calls()
            if x["pid"] in (c.pid, d.pid)]
    who = {c.pid: "worker-C", d.pid: "worker-D"}
    echo("    test runs: " + ", ".join(f"under {lock} by {who[pid]}" for pid, lock in runs))
    classes = dict(resumes[0].details.classes) if resumes else {}
    reran = list(resumes[0].details.reran or ()) if resumes else []
    for stale in reran:
        echo(f"    the resume record: {stale.get('done')} {stale.get('call')}, its "
             f"{stale.get('cause')} changed: " + "; ".join(map(str, stale.get("changed") or ())))
    checks.check([(s.get("call"), [str(c).split(":")[0] for c in s.get("changed") or ()])
                  for s in reran] == [("run_tests", [f"files.{ci_agent.LOCKFILE}"])],
                 f"run 2's resume record names the stale result (run_tests) and the file "
                 f"that changed ({ci_agent.LOCKFILE}, old -> new)")
    checks.check(code_c == -signal.SIGKILL and runs == [(c.pid, LOCK_1), (d.pid, LOCK_2)]
                 and len(cut) == 1 and classes.get(ResumeClass.REVALIDATE) == 1,
                 f"run 2: the lockfile changed ({LOCK_1} -> {LOCK_2}), so its test result was "
                 "stale (revalidate): worker D ran the tests again, under its own lockfile")
    result = info.result if isinstance(info.result, dict) else {}
    checks.check(info.status == RunStatus.COMPLETED and result.get("tests") is True,
                 f"run 2 completed after its fresh test run ({info.status})")
