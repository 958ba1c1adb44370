"""A coding agent: it attaches the repository to the run as a workspace,
lets a model plan a fix, edits the files (each step that changes the tree is
saved with its result: a durable snapshot in the same commit), runs the
tests, has the model write the CI job's message and submits a CI job, as an
effect that journals the job id the moment CI accepts it
(`await op.accepted(job_id)`).

If the worker dies while CI runs, the worker that takes the run over, on
another machine, first restores the last snapshot into a fresh directory
there (checked against its hash): it holds every edit a journaled step made,
so the edits are not redone: they are in the tree. Then it finds "run_ci:
accepted as job 471, no result" in the journal: it asks CI about job 471 (the
effect's `check`) until it has a result, and never submits a second job.

The test result is bound to what produced it: the workspace's snapshot and
the worker's `uv.lock` (`stead.Fingerprint`). A worker whose lockfile is
another one does not reuse it: the tests run again (or, if the CI job was
already submitted after them, the run pauses for a person).

The CI service is fake and file-backed (`stead.examples.services`, under
`$STEAD_EXAMPLE_SERVICES`, default ./example-services). Try it by hand:

    python -c "from stead.examples import ci_agent; ci_agent.make_sample_repo('repo')"
    stead start stead.examples.ci_agent:app fix_and_test '["repo", "add() subtracts"]'
    stead worker stead.examples.ci_agent:app --until-idle   # a CI job takes 3 s here
    cat example-services/ci.json
    stead runs show RUN                                      # its workspace and snapshot
    stead workspace restore RUN repo fixed-copy             # the saved tree, for a person

`stead demo ci` tells this story with real processes and a SIGKILL.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import stead
from stead.examples import services

app = stead.App("coder")

SAMPLE = {
    "calc.py": "def add(a: int, b: int) -> int:\n    return a - b\n",
    "test_calc.py": "from calc import add\n\n\ndef test_add() -> None:\n"
                    "    assert add(2, 2) == 4\n",
}


def make_sample_repo(path: str | Path) -> Path:
    """A small repository with a bug for the agent to fix."""
    repo = Path(path)
    repo.mkdir(parents=True, exist_ok=True)
    for name, text in SAMPLE.items():
        (repo / name).write_text(text)
    return repo


# The environment the tests run in: the lockfile in the worker's directory.
LOCKFILE = "uv.lock"


class ScriptedCoder:
    """Stands in for a real model: it plans the one-line fix (a tool call) for
    the code it is shown, or writes a CI message for a test report. The
    provider logs every request; it can be made slow (`ModelCalls.stall`)."""

    name = "scripted-coder"

    async def complete(self, messages: Sequence[Mapping[str, Any]],
                       **params: Any) -> stead.Completion:
        purpose = "write_message" if "test report" in str(messages[0]["content"]) \
            else "plan_fix"
        provider = services.ModelCalls()
        provider.note(self.name, purpose)
        while provider.stalled(purpose):
            await asyncio.sleep(0.05)
        if purpose == "write_message":
            return stead.Completion(text="Fix add(): it subtracted. Tests pass.",
                                    model=self.name, stop_reason="end_turn")
        edit = {"path": "calc.py", "old": "return a - b", "new": "return a + b"}
        return stead.Completion(text="add() subtracts; it should add.", model=self.name,
                                tool_calls=(stead.ToolCall("call_1", "edit_file", edit),),
                                stop_reason="tool_use")


MODEL = ScriptedCoder()


# -- tools -----------------------------------------------------------------------------
def read_repo(repo: str | Path | stead.WorkspacePath) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(Path(repo).glob("*.py"))}


def edit_file(repo: str | Path | stead.WorkspacePath, path: str, old: str,
              new: str) -> dict[str, Any]:
    """Replace `old` by `new` in one file. Written so that running it again
    (the worker died before the step was journaled) changes nothing more."""
    file = Path(repo, path)
    text = file.read_text()
    if old not in text and new in text:
        return {"path": path, "changed": False}
    if text.count(old) != 1:
        raise ValueError(f"{path}: expected {old!r} exactly once")
    file.write_text(text.replace(old, new))
    return {"path": path, "changed": True}


def run_tests(repo: str | Path | stead.WorkspacePath) -> dict[str, Any]:
    """Run the repository's tests here (test_*.py: each test_ function),
    under this worker's Python. The services' ledger of test runs notes each
    one, with the lockfile it ran under."""
    lock = Path(LOCKFILE)
    services.TestRuns().note(lock.read_text().strip() if lock.is_file() else None)
    code = ("import importlib, pathlib, sys\nsys.path.insert(0, '.')\nfailed = []\n"
            "for f in sorted(pathlib.Path('.').glob('test_*.py')):\n"
            "    m = importlib.import_module(f.stem)\n"
            "    for name in [n for n in dir(m) if n.startswith('test_')]:\n"
            "        try:\n            getattr(m, name)()\n"
            "        except AssertionError:\n            failed.append(f'{f.stem}.{name}')\n"
            "print(','.join(failed))\n")
    # -B: the tests leave no bytecode in the tree, which would change it.
    done = subprocess.run([sys.executable, "-B", "-c", code], cwd=str(repo), capture_output=True,
                          text=True, timeout=60, check=False)
    failed = [t for t in done.stdout.strip().split(",") if t]
    return {"passed": done.returncode == 0 and not failed, "failed": failed}


async def run_ci(op: stead.Operation, sha: str, message: str) -> dict[str, Any]:
    """An effect: submit the job, journal its id at once, wait for the result."""
    ci = services.CI()
    job = ci.submit(sha, key=op.key)
    await op.accepted(str(job))  # from here on, a takeover asks about this job
    while (status := ci.status(job)) == "pending":
        await asyncio.sleep(0.25)
    return {"job": job, "status": status}


def ci_check(op: stead.Operation) -> stead.Outcome:
    """Asked after a takeover: what does CI know of the job (by its id, or by
    the operation key if the worker died before the id was journaled)?"""
    ci = services.CI()
    job = int(op.external_id) if op.external_id else ci.find(op.key)
    if job is None:
        return stead.Outcome.not_found()  # never submitted: safe to submit
    status = ci.status(job)
    if status == "pending":
        return stead.Outcome.pending(f"job {job} is running")
    if status == "unknown":
        return stead.Outcome.unknown(f"CI has no job {job}")
    return stead.Outcome.done({"job": job, "status": status})


# -- the workflow ------------------------------------------------------------------------
@app.workflow(version=1)
async def fix_and_test(run: stead.Run, repo: str, issue: str) -> dict[str, Any]:
    # From here on the repository is ws.path: after a takeover, the directory
    # its last snapshot was restored into on the new worker.
    ws = await run.workspace("repo", repo)
    files = await run.step("read_repo", read_repo, ws.path)
    shown = "\n\n".join(f"# {name}\n{text}" for name, text in files.items())
    plan = await run.llm("plan_fix", MODEL, [
        {"role": "system", "content": "Fix the issue with the edit_file tool."},
        {"role": "user", "content": f"{issue}\n\n{shown}"},
    ])
    edited = []
    for call in plan.tool_calls:
        if call.name == "edit_file":
            change = await run.step("edit_file", edit_file, ws.path, **call.arguments)
            edited.append(change["path"])
    # Each step that changed the tree was saved with its result (its snapshot
    # rode in the same commit), so the edits survive a takeover without an
    # explicit `ws.save()`; one is made here only if no step changed anything.
    snap = ws.snapshot or await ws.save()
    sha = snap.commit or snap.tree[:12]
    # Bound to the worker's lockfile (relative: the worker's directory), and,
    # as every step that reads the workspace, to its environment (its tree,
    # the Python version and platform, $STEAD_IMAGE) by default.
    tests = await run.step("run_tests", run_tests, ws.path,
                           fresh=stead.Fingerprint(files=[LOCKFILE]))
    note = await run.llm("write_message", MODEL, [
        {"role": "user", "content": f"Write the CI message for this test report: {tests}"}])
    ci: dict[str, Any] = await run.effect("run_ci", run_ci, sha, note.text, check=ci_check,
                                          poll_every=0.25)
    return {"commit": sha, "edited": edited, "tests": tests["passed"], "ci_job": ci["job"],
            "ci": ci["status"]}
