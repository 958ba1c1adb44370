"""The CI story with real worker processes, on both stores: the coding agent
edits its repository, saves it and submits CI job 471; its worker is
SIGKILLed and its machine's folder deleted; a worker in another folder
restores the tree (hash-equal) before replay, does not redo the edit, polls
job 471 and never submits 472. And a changed lockfile on the new worker makes
the recorded test result stale: the tests run again there. And a worker whose
takeover meets a hostile snapshot row writes nothing outside its restore
folder and stops the run for a person, once."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import stead
from stead.examples import ci_agent, services
from stead.files import trees
from stead.records import RecordKind, RecordStatus, ResumeClass, RunStatus
from tests.test_workspace_restore import chain, hostile_snapshot, state
from tests.workers import edit_app
from tests.workers.procs import KILLED, wait_until

pytestmark = pytest.mark.slow
APP = "stead.examples.ci_agent:app"
TOP = Path(__file__).parent.parent  # where `tests.workers` imports from


class Machines:
    """Worker processes, each in its own folder (a machine) with its uv.lock."""

    def __init__(self, tmp: Path, url: str) -> None:
        self.tmp, self.url = tmp, url
        self.services = tmp / "services"
        self.procs: list[subprocess.Popen[bytes]] = []

    def folder(self, label: str, lock: str) -> Path:
        home = self.tmp / f"machine-{label}"
        home.mkdir()
        (home / ci_agent.LOCKFILE).write_text(lock)
        return home

    def worker(self, label: str, home: Path, app: str = APP) -> subprocess.Popen[bytes]:
        env = {**os.environ, services.ENV: str(self.services), "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join([str(TOP), os.environ.get("PYTHONPATH", "")])}
        with open(self.tmp / f"worker-{label}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "stead", "--db", self.url, "worker", app, "--lease", "1",
                 "--poll", "0.05", "--worker-id", f"worker-{label}"],
                cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def machines(tmp_path: Path, db_url: str) -> Iterator[Machines]:
    found = Machines(tmp_path, db_url)
    yield found
    found.stop_all()


async def _started(machines: Machines, client: stead.Client, label: str, lock: str
                   ) -> tuple[str, Path, subprocess.Popen[bytes]]:
    home = machines.folder(label, lock)
    repo = ci_agent.make_sample_repo(home / "repo")
    info = await client.start(ci_agent.fix_and_test, str(repo), "add() subtracts")
    return info.run_id, home, machines.worker(label, home)


async def _kill(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGKILL)
    await wait_until("the worker to die", lambda: proc.poll() is not None)
    return proc.returncode


async def test_the_ci_story_restores_the_tree_elsewhere_and_polls_job_471(
    machines: Machines, db_url: str,
) -> None:
    ci = services.CI(machines.services)
    ci.configure(runs_for=None)
    store = await stead.open_store(db_url)
    try:
        client = stead.Client(store, ci_agent.app)
        run_id, home_a, a = await _started(machines, client, "A", "L1")

        async def accepted() -> bool:
            return any(r.name == "run_ci" and r.status == RecordStatus.ACCEPTED
                       for r in await client.journal(run_id))

        await wait_until("CI to accept job 471", accepted)
        assert await _kill(a) == KILLED
        shutil.rmtree(home_a)  # the machine is gone, with the repository it edited
        home_b = machines.folder("B", "L1")
        b = machines.worker("B", home_b)
        await wait_until("worker B to poll job 471", lambda: any(
            c["op"] == "status" and c["pid"] == b.pid for c in ci.calls()))
        ci.finish(471, "passed")
        result = await client.result(run_id, timeout=30)

        assert result["ci_job"] == 471 and result["ci"] == "passed"
        assert list(ci.jobs()) == [471]  # 472 was never submitted
        assert [c["pid"] for c in ci.calls() if c["op"] == "submit"] == [a.pid]
        journal = await client.journal(run_id)
        assert [r.epoch for r in journal if r.name == "edit_file"
                and r.kind == RecordKind.STEP] == [1]  # not redone
        assert [c["pid"] for c in services.TestRuns(machines.services).calls()] == [a.pid]
        [resume] = await client.resumes(run_id)
        assert resume.details.classes.get(ResumeClass.PENDING_EXTERNAL) == 1
        restored = (resume.details.workspaces or {})["repo"]
        [snap] = await client.snapshots(run_id)
        where = Path(restored["path"])
        assert home_b in where.parents and restored["seq"] == snap.seq
        assert trees.scan(where).sha256 == snap.tree == restored["tree"]
        assert "return a + b" in (where / "calc.py").read_text()
    finally:
        await store.close()


async def test_an_edit_no_save_followed_survives_a_sigkill_and_is_not_redone(
    machines: Machines, db_url: str,
) -> None:
    store = await stead.open_store(db_url)
    try:
        client = stead.Client(store, edit_app.app)
        home_a = machines.folder("A", "L1")
        repo = ci_agent.make_sample_repo(home_a / "repo")
        ledger, gate = machines.tmp / "ledger", machines.tmp / "gate"
        info = await client.start(edit_app.edit_then_hold, str(repo), str(ledger), str(gate))
        a = machines.worker("A", home_a, "tests.workers.edit_app:app")
        await wait_until("worker A to hold after its edit", lambda: ledger.is_file()
                         and f"hold {a.pid}" in ledger.read_text())
        assert await _kill(a) == KILLED  # no explicit save was ever made
        shutil.rmtree(home_a)
        gate.touch()
        home_b = machines.folder("B", "L1")
        b = machines.worker("B", home_b, "tests.workers.edit_app:app")
        result = await client.result(info.run_id, timeout=30)

        assert "return a + b" in result["calc"]
        assert home_b in Path(result["path"]).parents  # restored on the new worker
        edits = [line for line in ledger.read_text().splitlines() if line.startswith("edit")]
        assert edits == [f"edit {a.pid}"]  # the step was not redone
        assert f"hold {b.pid}" in ledger.read_text()
        journal = await client.journal(info.run_id)
        [edit] = [r for r in journal if r.name == "edit" and r.kind == RecordKind.STEP]
        [snap] = await client.snapshots(info.run_id)
        assert snap.seq == edit.seq + 1 and snap.epoch == 1  # in the step's own commit
        assert trees.scan(Path(result["path"])).sha256 == snap.tree
    finally:
        await store.close()


async def test_a_changed_lockfile_makes_the_test_result_stale_and_it_reruns(
    machines: Machines, db_url: str,
) -> None:
    services.CI(machines.services).configure(runs_for=0.2)
    provider = services.ModelCalls(machines.services)
    provider.stall("write_message")  # the run waits after its tests, before CI
    store = await stead.open_store(db_url)
    try:
        client = stead.Client(store, ci_agent.app)
        run_id, home_c, c = await _started(machines, client, "C", "L1")
        await wait_until("worker C to run the tests", lambda: any(
            x["purpose"] == "write_message" for x in provider.calls()))
        assert await _kill(c) == KILLED
        shutil.rmtree(home_c)
        provider.stall(None)
        d = machines.worker("D", machines.folder("D", "L2"))
        result = await client.result(run_id, timeout=30)

        assert result["tests"] is True and result["ci_job"] == 471
        runs = services.TestRuns(machines.services).calls()
        assert [(x["pid"], x["lockfile"]) for x in runs] == [(c.pid, "L1"), (d.pid, "L2")]
        journal = await client.journal(run_id)
        assert [r.kind for r in journal].count(RecordKind.CUT) == 1
        [resume] = await client.resumes(run_id)
        assert resume.details.classes.get(ResumeClass.REVALIDATE) == 1
        [stale] = resume.details.reran or []  # the record names the lockfile, old -> new
        assert (stale["call"], stale["done"]) == ("run_tests", "rerun")
        assert [c.split(":")[0] for c in stale["changed"]] == [f"files.{ci_agent.LOCKFILE}"]
        assert (await client.get(run_id)).status == RunStatus.COMPLETED
    finally:
        await store.close()


async def test_a_worker_refuses_a_hostile_snapshot_and_stops_the_run_once(
    machines: Machines, db_url: str,
) -> None:
    store = await stead.open_store(db_url)
    try:
        client = stead.Client(store, ci_agent.app)
        info = await client.start(ci_agent.fix_and_test, "/nowhere", "add() subtracts")
        [row] = await store.claim("impostor", ["fix_and_test@1"], 1.0, 1)
        # Restored into HOME/.stead-workspaces/RUN/repo.EPOCH.*: three folders up is HOME.
        await hostile_snapshot(store, info.run_id, "impostor", row.epoch, chain(3))
        home = machines.folder("E", "L1")
        restored = home / ".stead-workspaces"
        before = state(home, restored)
        worker = machines.worker("E", home)

        async def stopped() -> bool:
            return (await client.get(info.run_id)).status == RunStatus.INCOMPATIBLE

        await wait_until("worker E to stop the run", stopped)
        assert state(home, restored) == before
        assert not [p for p in restored.rglob("*") if not p.is_dir()]
        run = await client.get(info.run_id)
        assert "WorkspaceUnsafe" in str(run.error) and "nothing was written" in str(run.error)
        assert worker.poll() is None  # the worker goes on serving other runs
        [resume] = await client.resumes(info.run_id)
        assert resume.worker_id == "worker-E"
    finally:
        await store.close()
