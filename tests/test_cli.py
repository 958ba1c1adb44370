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
import stead.store
from stead import run_ids
from stead.cli import COMMANDS, common, main
from stead.records import Fence
from stead.views import runs_view, timeline
from tests import stress

T = TypeVar("T")
DEADLINE = 30.0 * stress.slow()  # scaled to the machine's load (tests/stress.py)

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
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, [*path, name])
        else:
            yield [*path, name], cmd


def test_the_root_lists_each_command_with_its_own_first_line_of_help() -> None:
    # `stead --help` lists the commands from `COMMANDS` without importing them.
    ctx = click.Context(main)
    for name, place in COMMANDS.items():
        cmd = main.get_command(ctx, name)
        assert cmd is not None, name
        assert cmd.get_short_help_str(limit=10_000) == place.summary, name
    assert common.DEFAULT_URL == stead.store.DEFAULT_URL


def test_every_command_and_group_has_help() -> None:
    found = list(_commands(main, []))
    names = {" ".join(p) for p, _ in found}
    assert {"", "worker", "start", "runs", "runs ls", "runs show", "runs cancel",
            "reconcile", "demo"} <= names
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
    assert run_ids.dated(run_id) and "\n" not in run_id

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
    out = fails(db_url, "worker", app_module)
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
    assert "not valid JSON" in fails(db_url, "start", spec, "greet", "[1,")
    assert "must be a JSON array" in fails(db_url, "start", spec, "greet", '{"a": 1}')
    assert "must be a JSON object" in fails(
        db_url, "start", spec, "greet", "--kwargs", "[1]"
    )
    assert "has no workflow nope" in fails(db_url, "start", spec, "nope")
    assert "has no workflow greet@7" in fails(db_url, "start", spec, "greet", "--version", "7")
    assert query(db_url, lambda c: c.list_runs()) == []


def test_bad_options_are_usage_errors(db_url: str) -> None:
    assert "bogus" in fails(db_url, "runs", "ls", "--status", "bogus")
    assert "--lease" in fails(db_url, "worker", "m:app", "--lease", "0")
    assert "--concurrency" in fails(db_url, "worker", "m:app", "--concurrency", "0")


def test_time_offsets_read_well() -> None:
    assert runs_view.offset(0.0123) == "+0.012s"
    assert runs_view.offset(245) == "+4m05s"
    assert runs_view.offset(2 * 3600 + 3 * 60 + 9) == "+2h03m"
    assert runs_view.offset(3 * 86400 + 4 * 3600) == "+3d04h"
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


# -- reconcile and effects in `runs show` -----------------------------------------
EFFECT_APP_SOURCE = '''
from pathlib import Path

import stead

app = stead.App("cli-effects")


def send_mail(op, workdir, to):
    # The first call drops the connection before the request is written; the
    # caller cannot tell that from a drop after it, so the outcome is unknown.
    tried = Path(workdir, "tried")
    if not tried.exists():
        tried.touch()
        raise stead.OutcomeUncertain("connection dropped")
    with open(Path(workdir, "outbox"), "a") as f:
        f.write(op.key + "\\n")
    return {"message_id": "m1"}


@app.workflow(version=1)
async def notify(run, workdir, to):
    try:
        sent = await run.effect("send_mail", send_mail, workdir, to)
    except stead.EffectCompensated as exc:
        return {"compensated": exc.detail}
    return {"sent": sent}
'''


@pytest.fixture
def effect_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`module:app` of an app whose mail effect stops its run as outcome_unknown."""
    name = f"clieffects_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(EFFECT_APP_SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield f"{name}:app"
    sys.modules.pop(name, None)


def _stopped_run(db_url: str, spec: str, tmp_path: Path) -> str:
    """Start a `notify` run and work until it stops as outcome_unknown."""
    run_id = ok(db_url, "start", spec, "notify", json.dumps([str(tmp_path), "ada@example.com"]),
                "-q").strip()
    ok(db_url, "worker", spec, "--until-idle", "--poll", "0.05")
    info = query(db_url, lambda c: c.get(run_id))
    assert info.status == "outcome_unknown", info
    return run_id


def _decisions(db_url: str, run_id: str) -> list[dict[str, Any]]:
    journal = query(db_url, lambda c: c.journal(run_id))
    return [json.loads(r.payload) for r in journal if r.status == "reconciled"]


def test_runs_show_says_what_is_known_and_how_to_reconcile(
    effect_app: str, db_url: str, tmp_path: Path
) -> None:
    run_id = _stopped_run(db_url, effect_app, tmp_path)
    key = f"{run_id}:0"
    out = ok(db_url, "runs", "show", run_id)
    assert "status    outcome_unknown" in out
    assert "outcome unknown: stead cannot tell whether effect 'send_mail' happened" in out
    assert f"  key        {key}  (attempt 1)" in out
    assert f'  arguments  {{"workdir":"{tmp_path}","to":"ada@example.com"}}' in out
    assert "  known      sent or not; no outcome recorded and no check to ask" in out
    for decision in ("--happened JSON", "--not-happened", "--compensate JSON"):
        assert f"stead reconcile {run_id} send_mail {decision} --why TEXT" in out
    lines = out.splitlines()
    at = lines.index("effects (1)")
    assert lines[at + 1:at + 5] == [
        f"  send_mail  key {key}   <- the run stopped here",
        "    phase    unknown (attempt 1)",
        "    history  intent > unknown",
        "    detail   outcome unknown: OutcomeUncertain: connection dropped",
    ]

    [effect] = json.loads(ok(db_url, "runs", "show", run_id, "--json"))["effects"]
    assert (effect["name"], effect["key"], effect["phase"], effect["history"]) == (
        "send_mail", key, "unknown", ["intent", "unknown"]
    )


def test_reconcile_not_happened_sends_it_once_and_the_run_completes(
    effect_app: str, db_url: str, tmp_path: Path
) -> None:
    run_id = _stopped_run(db_url, effect_app, tmp_path)
    assert not (tmp_path / "outbox").exists()  # nothing went out
    out = ok(db_url, "reconcile", run_id, "send_mail", "--not-happened", "--by", "ops",
             "--why", "not in the outbox")
    assert out.splitlines() == [
        f"run {run_id}: effect send_mail did not happen (decided by ops: not in the outbox)",
        "the run continues: it sends the effect, with the same key",
        "status running: a worker hosting notify@1 picks it up",
    ]
    assert _decisions(db_url, run_id) == [
        {"decision": "not_happened", "result": None, "by": "ops", "why": "not in the outbox"}
    ]
    ok(db_url, "worker", effect_app, "--until-idle", "--poll", "0.05")
    info = query(db_url, lambda c: c.get(run_id))
    assert info.status == "completed" and info.result == {"sent": {"message_id": "m1"}}
    assert (tmp_path / "outbox").read_text().splitlines() == [f"{run_id}:0"]  # sent once

    shown = ok(db_url, "runs", "show", run_id).splitlines()
    at = shown.index("effects (1)")
    assert shown[at + 1:at + 5] == [
        f"  send_mail  key {run_id}:0",
        "    phase    done (attempt 2)",
        "    history  intent > unknown > reconciled > intent > done",
        '    detail   {"message_id":"m1"} (after a decision: did not happen, by ops '
        "(not in the outbox))",
    ]
    assert not any(line.startswith("outcome unknown") for line in shown)

    # Decided already: there is nothing left to decide.
    out = fails(db_url, "reconcile", run_id, "send_mail", "--not-happened", "--by", "ops")
    assert "no effect 'send_mail' whose outcome is unknown" in out
    assert len(_decisions(db_url, run_id)) == 1


@pytest.mark.parametrize(("flag", "value", "result"), [
    ("--happened", '{"message_id": "m-found"}', {"sent": {"message_id": "m-found"}}),
    ("--compensate", '"apology sent"', {"compensated": "apology sent"}),
])
def test_reconcile_happened_or_compensated_never_sends_again(
    effect_app: str, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    flag: str, value: str, result: dict[str, Any],
) -> None:
    run_id = _stopped_run(db_url, effect_app, tmp_path)
    monkeypatch.setenv("USER", "carol")  # --by defaults to the OS user
    out = ok(db_url, "reconcile", run_id, "send_mail", flag, value)
    assert "(decided by carol)" in out.splitlines()[0]
    [decision] = _decisions(db_url, run_id)
    assert decision["by"] == "carol" and decision["result"] == json.loads(value)
    ok(db_url, "worker", effect_app, "--until-idle", "--poll", "0.05")
    info = query(db_url, lambda c: c.get(run_id))
    assert info.status == "completed" and info.result == result
    assert not (tmp_path / "outbox").exists()  # never sent
    shown = ok(db_url, "runs", "show", run_id).splitlines()
    at = shown.index("effects (1)")
    assert shown[at + 2] == "    phase    reconciled (attempt 1)"
    verb = "happened" if flag == "--happened" else "compensated"
    compact = json.dumps(json.loads(value), separators=(",", ":"))
    assert shown[at + 4] == f"    detail   {verb}, by carol: {compact}"


def test_reconcile_errors_are_clean(effect_app: str, db_url: str, tmp_path: Path) -> None:
    run_id = _stopped_run(db_url, effect_app, tmp_path)
    decide = ("reconcile", run_id, "send_mail")
    assert "exactly one decision" in fails(db_url, *decide, "--by", "ops")
    assert "exactly one decision" in fails(
        db_url, *decide, "--not-happened", "--happened", "1", "--by", "ops"
    )
    assert "not valid JSON" in fails(db_url, *decide, "--happened", "{m1", "--by", "o")
    assert "not valid JSON" in fails(db_url, *decide, "--compensate", "", "--by", "o")
    assert "no run 'nope'" in fails(db_url, "reconcile", "nope", "send_mail", "--not-happened")
    assert "no effect 'charge' whose outcome is unknown" in fails(
        db_url, "reconcile", run_id, "charge", "--not-happened"
    )
    missing = f"sqlite:///{tmp_path}/absent.db"
    assert "no database at" in fails(missing, *decide, "--not-happened")
    assert _decisions(db_url, run_id) == []  # nothing was decided by any of these
    assert query(db_url, lambda c: c.get(run_id)).status == "outcome_unknown"

    # A run that is not stopped has nothing to decide.
    pending = ok(db_url, "start", effect_app, "notify", json.dumps([str(tmp_path), "b"]),
                 "-q").strip()
    assert "no effect 'send_mail' whose outcome is unknown" in fails(
        db_url, "reconcile", pending, "send_mail", "--not-happened"
    )
    # Nor one whose worker may still be sending the effect (its intent is last).
    in_flight = query(db_url, _effect_in_flight)
    assert f"run {in_flight} is running, not outcome_unknown" in fails(
        db_url, "reconcile", in_flight, "send_mail", "--not-happened"
    )
    assert _decisions(db_url, in_flight) == []


async def _effect_in_flight(client: stead.Client) -> str:
    """A running run whose worker journaled an effect's intent and holds the lease."""
    info = await client.start("notify", "/nowhere", "c", version=1)
    claimed = await client.store.claim("w1", ["notify@1"], 60.0, 10)
    row = next(r for r in claimed if r.run_id == info.run_id)
    intent = stead.Record(seq=0, addr="0", attempt=1, kind="effect", name="send_mail",
                          digest="d", status="intent", payload='{"key": "k"}',
                          epoch=row.epoch, at=0.0)
    await client.store.append(Fence(info.run_id, row.epoch, "w1"), [intent])
    return info.run_id


def _rec(seq: int, addr: str, status: str, payload: Any, attempt: int = 1,
         name: str = "refund") -> stead.Record:
    return stead.Record(seq=seq, addr=addr, attempt=attempt, kind="effect", name=name,
                        digest="d", status=status, payload=json.dumps(payload), epoch=1,
                        at=100.0 + seq)


def test_each_effect_phase_reads_well() -> None:
    key = "r1:{}".format
    journal = [
        _rec(0, "0", "intent", {"key": key(0)}),
        _rec(1, "1", "intent", {"key": key(1)}, name="ci"),
        _rec(2, "1", "accepted", {"external_id": "471"}, name="ci"),
        _rec(3, "2", "intent", {"key": key(2)}),
        _rec(4, "2", "ok", {"result": {"refund": "rf_1"}}),
        _rec(5, "3", "intent", {"key": key(3)}),
        _rec(6, "3", "error", {"type": "ValueError", "message": "declined", "retry_at": 9.0}),
        _rec(7, "4", "intent", {"key": key(4)}),
        _rec(8, "4", "unknown", {"reason": "TimeoutError"}),
        _rec(9, "5", "intent", {"key": key(5)}, name="mail"),
        _rec(10, "5", "reconciled", {"decision": "happened", "result": {"id": "m1"},
                                      "by": "alice", "why": "in the outbox"}, name="mail"),
    ]
    views = timeline.effect_views(journal)
    assert [(v.name, v.key, v.phase) for v in views] == [
        ("refund", key(0), "intent"), ("ci", key(1), "accepted"), ("refund", key(2), "done"),
        ("refund", key(3), "failed"), ("refund", key(4), "unknown"),
        ("mail", key(5), "reconciled"),
    ]
    assert [v.detail for v in views] == [
        "sent or not: no outcome recorded",
        "accepted outside as 471; no result recorded yet",
        '{"refund":"rf_1"}',
        "ValueError: declined (will retry)",
        "outcome unknown: TimeoutError",
        'happened, by alice (in the outbox): {"id":"m1"}',
    ]
    assert views[1].external_id == "471" and views[1].history == ("intent", "accepted")

    info = stead.RunInfo(
        run_id="r1", workflow="wf", version=1, task_id=None, status="outcome_unknown",
        epoch=2, created_at=100.0, updated_at=110.0, lease_owner=None,
        error={"type": "OutcomeUnknown", "message": "...", "effect": "refund", "key": key(0),
               "attempt": 1, "arguments": {"args": [1], "kwargs": {}}, "known": "sent or not"},
    )
    out = timeline.render_run(info, journal, [])
    # Several effects are named "refund": the command names this one by its key.
    assert f"stead reconcile r1 {key(0)} --not-happened --why TEXT" in out
    assert "effects (6)" in out
    marked = [line for line in out.splitlines() if line.endswith("<- the run stopped here")]
    assert marked == [f"  refund  key {key(0)}   <- the run stopped here"]
