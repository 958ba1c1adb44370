"""The `stead` command: every command through click's CliRunner, and `stead
worker` as a real process stopped with SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click
import pytest
from click.testing import CliRunner, Result

import stead
from stead import timeline
from stead.cli import main

T = TypeVar("T")
DEADLINE = 30.0

APP_SOURCE = '''
import time
from pathlib import Path

import stead

app = stead.App("cli-test")
not_an_app = {"hello": "world"}


def shout(name, punctuation):
    return f"hello {name}{punctuation}"


@app.workflow(version=1)
async def greet(run, name, punctuation="!"):
    return await run.step("shout", shout, name, punctuation)


def first(workdir):
    with open(Path(workdir, "first.count"), "a") as f:
        f.write("x")
    Path(workdir, "first.started").touch()
    deadline = time.monotonic() + 60
    while not Path(workdir, "go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "first done"


@app.workflow(version=1)
async def slow(run, workdir):
    a = await run.step("first", first, workdir)
    b = await run.step("second", lambda: "second done")
    return [a, b]
'''


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module with a stead app, importable from the current directory (as
    `stead worker` makes it); each test gets its own module name."""
    name = f"cliapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP_SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield name
    sys.modules.pop(name, None)


def cli(db_url: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--db", db_url, *args])


def ok(db_url: str, *args: str) -> str:
    result = cli(db_url, *args)
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def fails(db_url: str, *args: str, code: int = 1) -> str:
    """The command fails with a clean message (no traceback) and `code`."""
    result = cli(db_url, *args)
    assert result.exit_code == code, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert "Error:" in result.output
    return result.output


def query(db_url: str, fn: Callable[[stead.Client], Coroutine[Any, Any, T]]) -> T:
    async def go() -> T:
        store = await stead.open_store(db_url)
        try:
            return await fn(stead.Client(store))
        finally:
            await store.close()

    return asyncio.run(go())


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# -- help ----------------------------------------------------------------------
def _commands(group: click.Group, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
    yield path, group
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, [*path, name])
        else:
            yield [*path, name], cmd


def test_every_command_and_group_has_help() -> None:
    found = list(_commands(main, []))
    names = {" ".join(p) for p, _ in found}
    assert {"", "worker", "start", "runs", "runs ls", "runs show", "runs cancel",
            "demo"} <= names
    for path, cmd in found:
        assert (cmd.help or "").strip(), f"`stead {' '.join(path)}` has no help text"
        for param in cmd.params:
            if isinstance(param, click.Option):
                assert (param.help or "").strip(), f"{' '.join(path)} {param.opts} has no help"
        result = CliRunner().invoke(main, [*path, "--help"])
        assert result.exit_code == 0, result.output
        assert "Usage:" in result.output
        assert (cmd.help or "").split("\n")[0].strip()[:30] in " ".join(result.output.split())


# -- start ---------------------------------------------------------------------
def test_start_prints_the_run_id_and_returns_the_live_run_for_a_task(
    app_module: str, db_url: str
) -> None:
    out = ok(db_url, "start", f"{app_module}:app", "greet", '["ada"]', "--task-id", "t-1")
    assert out.startswith("started run ")
    run_id = out.split()[2]
    assert "(greet@1, task t-1)" in out

    again = ok(db_url, "start", f"{app_module}:app", "greet", '["ada"]', "--task-id", "t-1")
    assert again.strip() == (
        f"run {run_id} already exists for task t-1 (status pending); not started again"
    )
    runs = query(db_url, lambda c: c.list_runs())
    assert [r.run_id for r in runs] == [run_id]


def test_start_with_kwargs_then_worker_until_idle_completes_the_run(
    app_module: str, db_url: str
) -> None:
    out = ok(db_url, "start", f"{app_module}:app", "greet", '["bob"]',
             "--kwargs", '{"punctuation": "?"}', "--version", "1", "-q")
    run_id = out.strip()
    assert len(run_id) == 32 and "\n" not in run_id

    ok(db_url, "worker", f"{app_module}:app", "--until-idle", "--poll", "0.05")
    info = query(db_url, lambda c: c.get(run_id))
    assert info.status == "completed"
    assert info.result == "hello bob?"


# -- runs ls / show / cancel -------------------------------------------------------
def test_runs_ls_filters_and_prints_json(app_module: str, db_url: str) -> None:
    done = ok(db_url, "start", f"{app_module}:app", "greet", '["a"]', "-q").strip()
    ok(db_url, "worker", f"{app_module}:app", "--until-idle", "--poll", "0.05")
    waiting = ok(db_url, "start", f"{app_module}:app", "greet", '["b"]', "-q").strip()

    table = ok(db_url, "runs", "ls")
    assert table.splitlines()[0].split() == ["run", "workflow", "status", "task", "created",
                                             "updated"]
    assert table.index(waiting) < table.index(done)  # newest first
    assert done in ok(db_url, "runs", "ls", "--status", "completed")
    assert waiting not in ok(db_url, "runs", "ls", "--status", "completed")
    assert ok(db_url, "runs", "ls", "--workflow", "slow").strip() == "no runs"
    rows = json.loads(ok(db_url, "runs", "ls", "--json", "--limit", "1"))
    assert [r["run_id"] for r in rows] == [waiting]
    assert rows[0]["status"] == "pending" and rows[0]["workflow"] == "greet"


def test_runs_show_prints_status_result_and_the_journal(app_module: str, db_url: str) -> None:
    run_id = ok(db_url, "start", f"{app_module}:app", "greet", '["cy"]', "-q").strip()
    pending = ok(db_url, "runs", "show", run_id)
    assert "status    pending" in pending
    assert "(no records yet)" in pending

    ok(db_url, "worker", f"{app_module}:app", "--until-idle", "--poll", "0.05")
    out = ok(db_url, "runs", "show", run_id)
    assert f"run       {run_id}" in out
    assert "workflow  greet@1" in out
    assert "status    completed" in out
    assert 'result    "hello cy!"' in out
    assert "journal (1 record(s))" in out
    row = next(line for line in out.splitlines() if " shout " in line).split()
    assert row[0] == "0" and row[2:7] == ["step", "shout", "ok", "1", "1"]
    assert " ".join(row[7:]) == '"hello cy!"'
    assert "resumes (0)" in out

    data = json.loads(ok(db_url, "runs", "show", run_id, "--json"))
    assert data["run"]["status"] == "completed" and data["run"]["result"] == "hello cy!"
    assert [(r["seq"], r["name"], r["payload"]) for r in data["journal"]] == [
        (0, "shout", "hello cy!")
    ]
    assert data["resumes"] == []


def test_runs_cancel(app_module: str, db_url: str) -> None:
    run_id = ok(db_url, "start", f"{app_module}:app", "greet", '["d"]', "-q").strip()
    assert ok(db_url, "runs", "cancel", run_id).strip() == (
        f"cancelled run {run_id} (was pending)"
    )
    assert query(db_url, lambda c: c.get(run_id)).status == "cancelled"
    assert "was already cancelled" in ok(db_url, "runs", "cancel", run_id)

    done = ok(db_url, "start", f"{app_module}:app", "greet", '["e"]', "-q").strip()
    ok(db_url, "worker", f"{app_module}:app", "--until-idle", "--poll", "0.05")
    out = fails(db_url, "runs", "cancel", done)
    assert "already ended as completed" in out
    assert query(db_url, lambda c: c.get(done)).status == "completed"


# -- errors ----------------------------------------------------------------------
def test_unknown_run_id_is_a_clean_error(app_module: str, db_url: str) -> None:
    ok(db_url, "start", f"{app_module}:app", "greet", '["x"]')  # the database exists
    assert "no run 'nope'" in fails(db_url, "runs", "show", "nope")
    assert "no run 'nope'" in fails(db_url, "runs", "cancel", "nope")


def test_reading_commands_refuse_a_missing_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/absent.db"
    for args in (["runs", "ls"], ["runs", "show", "x"], ["runs", "cancel", "x"]):
        assert "no database at" in fails(url, *args)
    assert not (tmp_path / "absent.db").exists()


def test_bad_module_app_specs_are_clean_errors(app_module: str, db_url: str) -> None:
    out = fails(db_url, "worker", "no_such_module_xyz:app")
    assert "cannot import module 'no_such_module_xyz'" in out
    out = fails(db_url, "start", f"{app_module}:nothing", "greet")
    assert f"module '{app_module}' has no attribute 'nothing'" in out
    out = fails(db_url, "worker", f"{app_module}:not_an_app")
    assert "is a dict, not a stead.App" in out
    out = fails(db_url, "worker", app_module, code=2)
    assert "is not module:attribute" in out


def test_a_module_whose_own_import_fails_shows_its_error(
    app_module: str, db_url: str, tmp_path: Path
) -> None:
    (tmp_path / "broken_cli_mod.py").write_text("import no_such_dependency_xyz\n")
    try:
        result = cli(db_url, "worker", "broken_cli_mod:app")
    finally:
        sys.modules.pop("broken_cli_mod", None)
    assert result.exit_code == 1
    assert isinstance(result.exception, ModuleNotFoundError)
    assert result.exception.name == "no_such_dependency_xyz"


def test_bad_json_and_unknown_workflow_are_clean_errors(app_module: str, db_url: str) -> None:
    spec = f"{app_module}:app"
    assert "not valid JSON" in fails(db_url, "start", spec, "greet", "[1,", code=2)
    assert "must be a JSON array" in fails(db_url, "start", spec, "greet", '{"a": 1}', code=2)
    assert "must be a JSON object" in fails(
        db_url, "start", spec, "greet", "--kwargs", "[1]", code=2
    )
    assert "has no workflow nope" in fails(db_url, "start", spec, "nope")
    assert "has no workflow greet@7" in fails(db_url, "start", spec, "greet", "--version", "7")
    assert query(db_url, lambda c: c.list_runs()) == []


def test_bad_options_are_usage_errors(db_url: str) -> None:
    assert "bogus" in fails(db_url, "runs", "ls", "--status", "bogus", code=2)
    assert "--lease" in fails(db_url, "worker", "m:app", "--lease", "0", code=2)
    assert "--concurrency" in fails(db_url, "worker", "m:app", "--concurrency", "0", code=2)


def test_time_offsets_read_well() -> None:
    assert timeline.offset(0.0123) == "+0.012s"
    assert timeline.offset(245) == "+4m05s"
    assert timeline.offset(2 * 3600 + 3 * 60 + 9) == "+2h03m"
    assert timeline.offset(3 * 86400 + 4 * 3600) == "+3d04h"
    assert timeline.shorten("x" * 100, 10) == "x" * 9 + "…"


# -- stead worker as a real process -----------------------------------------------
class WorkerProcess:
    def __init__(self, db_url: str, spec: str, cwd: Path, *extra: str) -> None:
        self.log = cwd / f"worker-{uuid.uuid4().hex[:6]}.log"
        self._out = open(self.log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stead", "--db", db_url, "worker", spec,
             "--poll", "0.05", *extra],
            cwd=cwd, stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=DEADLINE)

    def output(self) -> str:
        return self.log.read_text()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=DEADLINE)
        self._out.close()


@pytest.mark.slow
def test_worker_process_runs_a_run_and_exits_0_on_sigterm(
    app_module: str, db_url: str, tmp_path: Path
) -> None:
    worker = WorkerProcess(db_url, f"{app_module}:app", tmp_path, "--worker-id", "w-proc")
    try:
        run_id = ok(db_url, "start", f"{app_module}:app", "greet", '["eve"]', "-q").strip()
        wait_until(lambda: query(db_url, lambda c: c.get(run_id)).status == "completed",
                   "the worker process to complete the run")
        assert worker.terminate() == 0, worker.output()
    finally:
        worker.close()
    out = worker.output()
    assert "worker w-proc started: hosting greet@1, slow@1" in out
    assert "SIGTERM received, stopping" in out
    assert "worker w-proc stopped" in out
    assert query(db_url, lambda c: c.get(run_id)).result == "hello eve!"


@pytest.mark.slow
def test_sigterm_mid_step_releases_the_run_at_the_next_boundary(
    app_module: str, db_url: str, tmp_path: Path
) -> None:
    """Graceful stop: the running step finishes and is journaled, the run is
    released (not failed), the process exits 0; the next worker resumes it
    without running the finished step again."""
    spec = f"{app_module}:app"
    run_id = ok(db_url, "start", spec, "slow", json.dumps([str(tmp_path)]), "-q").strip()
    worker = WorkerProcess(db_url, spec, tmp_path, "--worker-id", "w-drain")
    try:
        wait_until((tmp_path / "first.started").exists, "step `first` to start")
        worker.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "SIGTERM received" in worker.output(), "the worker to see SIGTERM")
        (tmp_path / "go").touch()
        assert worker.proc.wait(timeout=DEADLINE) == 0, worker.output()
    finally:
        worker.close()

    info = query(db_url, lambda c: c.get(run_id))
    assert info.status == "running" and info.lease_owner is None  # released, claimable
    journal = query(db_url, lambda c: c.journal(run_id))
    assert [(r.name, r.status) for r in journal] == [("first", "ok")]

    ok(db_url, "worker", spec, "--until-idle", "--poll", "0.05", "--worker-id", "w-next")
    info = query(db_url, lambda c: c.get(run_id))
    assert info.status == "completed"
    assert info.result == ["first done", "second done"]
    assert (tmp_path / "first.count").read_text() == "x"  # `first` ran once, ever
    shown = ok(db_url, "runs", "show", run_id)
    assert "-- resumed by w-next at epoch 2: 1 record(s) above reused --" in shown
    assert "epoch 2  by w-next" in shown and "from seq 1" in shown
