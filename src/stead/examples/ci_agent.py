"""A coding agent: it reads a repository, lets a model plan a fix, edits the
files, and submits a CI job, as an effect that journals the job id the moment
CI accepts it (`await op.accepted(job_id)`).

If the worker dies while CI runs, the worker that takes the run over finds
"run_ci: accepted as job 471, no result" in the journal: it asks CI about job
471 (the effect's `check`) until it has a result, and never submits a second
job. Edits are steps: each is journaled once and not redone on replay.

The CI service is fake and file-backed (`stead.examples.services`, under
`$STEAD_EXAMPLE_SERVICES`, default ./example-services). Try it by hand:

    python -c "from stead.examples import ci_agent; ci_agent.make_sample_repo('repo')"
    stead start stead.examples.ci_agent:app fix_and_test '["repo", "add() subtracts"]'
    stead worker stead.examples.ci_agent:app --until-idle   # a CI job takes 3 s here
    cat example-services/ci.json

`stead demo ci` tells this story with real processes and a SIGKILL.
"""

from __future__ import annotations

import asyncio
import hashlib
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


class ScriptedCoder:
    """Stands in for a real model: it reads the code it is shown and plans the
    one-line fix (a tool call). The provider logs every request."""

    name = "scripted-coder"

    async def complete(self, messages: Sequence[Mapping[str, Any]],
                       **params: Any) -> stead.Completion:
        services.ModelCalls().note(self.name, "plan_fix")
        edit = {"path": "calc.py", "old": "return a - b", "new": "return a + b"}
        return stead.Completion(text="add() subtracts; it should add.", model=self.name,
                                tool_calls=(stead.ToolCall("call_1", "edit_file", edit),),
                                stop_reason="tool_use")


MODEL = ScriptedCoder()


# -- tools -----------------------------------------------------------------------------
def read_repo(repo: str) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(Path(repo).glob("*.py"))}


def edit_file(repo: str, path: str, old: str, new: str) -> dict[str, Any]:
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


def commit(repo: str) -> str:
    """A content hash of the tree stands in for `git commit`."""
    digest = hashlib.sha256()
    for name, text in read_repo(repo).items():
        digest.update(f"{name}\0{text}\0".encode())
    return digest.hexdigest()[:12]


async def run_ci(op: stead.Operation, sha: str) -> dict[str, Any]:
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
    files = await run.step("read_repo", read_repo, repo)
    shown = "\n\n".join(f"# {name}\n{text}" for name, text in files.items())
    plan = await run.llm("plan_fix", MODEL, [
        {"role": "system", "content": "Fix the issue with the edit_file tool."},
        {"role": "user", "content": f"{issue}\n\n{shown}"},
    ])
    edited = []
    for call in plan.tool_calls:
        if call.name == "edit_file":
            change = await run.step("edit_file", edit_file, repo, **call.arguments)
            edited.append(change["path"])
    sha = await run.step("commit", commit, repo)
    ci: dict[str, Any] = await run.effect("run_ci", run_ci, sha, check=ci_check,
                                          poll_every=0.25)
    return {"commit": sha, "edited": edited, "ci_job": ci["job"], "ci": ci["status"]}
