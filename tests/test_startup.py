"""`stead --help` and `stead runs ls` start quickly: they import neither the
optional libraries (schemas, cron, web, SDKs, tracing, PostgreSQL's driver
for an SQLite URL) nor what runs workflows. Pinned by what a fresh process
has imported, not by a clock, so a loaded machine cannot make it flaky; the
CPU time itself is measured by `python -m bench.startup`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers import procs

# Libraries no listing needs: each is imported where it is used.
LIBRARIES = ("jsonschema", "croniter", "pydantic", "starlette", "uvicorn", "openai",
             "anthropic", "opentelemetry", "psycopg", "psycopg_pool", "httpx", "agents",
             "pydantic_ai", "langgraph", "mcp")
# What hosts workflows, what only other commands draw, and the crash harness.
RUNTIME = ("stead.worker", "stead.leases", "stead.testing", "stead.web", "stead.contrib",
           "stead.demos", "stead.examples", "stead.operator", "stead.views.context_view",
           "stead.views.workspace_view")
# What runs a workflow's code: the client loads it only to replay or migrate.
EXECUTION = ("stead.run", "stead.execution", "stead.dryrun", "stead.takeover",
             "stead.workflow.effects", "stead.llm", "stead.guard", "stead.workflow.revalidation")
# What a listing reads without: the client's parts (`runs ls` lists from the
# store, `stead.client.listing`), the app, the workflow side, and what the
# store loads only when asked (keys, searches, queue limits, exports, the
# records of a history, the flows of streams).
NOT_LISTING = ("stead.client.client", "stead.client.base", "stead.client.deciding",
               "stead.client.delivering", "stead.client.forks", "stead.client.inspecting",
               "stead.client.migrating", "stead.client.revisions", "stead.client.starting",
               "stead.app", "stead.workflow", "stead.policy", "stead.migrations", "stead.intent",
               "stead.keys", "stead.searches", "stead.queues", "stead.exports",
               "stead.records.histories", "stead.store._streams", "stead.stream_records")
# The records a listing does not build: it reads runs' rows (`records.runs`;
# with --stranded the fleet's too), and a store imports the records of a
# journal, a takeover and waits where the first is built. It draws its table
# with `views.runs_view`, not the timeline, which names a journal's records.
NOT_BUILT = ("stead.records.journal", "stead.records.resumes", "stead.records.waits",
             "stead.views.timeline")
# The standard library's costly corners a listing does not need: finding the
# SQL files through importlib.resources (tempfile, zipfile), the -wal watch,
# the paths of run exports.
STDLIB = ("importlib.resources", "tempfile", "zipfile", "ctypes", "pathlib")
# Imported by `stead --help`: nothing of stead but the command line's own
# root and what it shares (bounds and errors: the checks of options).
HELP_IMPORTS = {"stead", "stead.bounds", "stead.cli", "stead.cli.common", "stead.errors"}

# Runs the command in this interpreter and prints every module then imported.
PROBE = """
import json, sys
from stead.cli import main
try:
    main(sys.argv[1:], prog_name="stead")
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print(json.dumps(sorted(sys.modules)))
"""


def _imported(args: list[str], cwd: Path) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
                          text=True, cwd=cwd)
    assert done.returncode == 0, done.stderr
    names: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return set(names)


def _under(found: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in found if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_stead_help_imports_only_the_command_line(tmp_path: Path) -> None:
    found = _imported(["--help"], tmp_path)
    assert {m for m in found if m.split(".")[0] == "stead"} == HELP_IMPORTS
    assert not _under(found, LIBRARIES)
    assert "asyncio" not in found


@pytest.mark.parametrize("args", [["runs", "ls"], ["runs", "ls", "--stranded"]])
def test_listing_runs_imports_no_optional_library_and_no_worker(
        tmp_path: Path, args: list[str]) -> None:
    db = f"sqlite:///{tmp_path}/stead.db"
    subprocess.run([sys.executable, "-m", "stead", "--db", db, "db", "migrate"], check=True,
                   capture_output=True)
    found = _imported(["--db", db, *args], tmp_path)
    assert not _under(found, LIBRARIES)
    assert not _under(found, RUNTIME)
    assert "stead.store.sqlite" in found  # it did list, from the database


def test_listing_runs_imports_nothing_that_runs_a_workflow(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/stead.db"
    subprocess.run([sys.executable, "-m", "stead", "--db", db, "db", "migrate"], check=True,
                   capture_output=True)
    assert not _under(_imported(["--db", db, "runs", "ls"], tmp_path), EXECUTION)


@pytest.mark.parametrize("args", [["runs", "ls"], ["runs", "ls", "--stranded"]])
def test_listing_runs_needs_the_store_and_no_client(tmp_path: Path, args: list[str]) -> None:
    db = f"sqlite:///{tmp_path}/stead.db"
    subprocess.run([sys.executable, "-m", "stead", "--db", db, "db", "migrate"], check=True,
                   capture_output=True)
    found = _imported(["--db", db, *args], tmp_path)
    assert not _under(found, NOT_LISTING)
    assert not _under(found, NOT_BUILT)
    assert not _under(found, STDLIB)
    assert "stead.client.listing" in found
    # The fleet's records (hosts, backlog, schedules, stranded runs) only for --stranded.
    assert ("stead.records.fleet" in found) == ("--stranded" in args)


# What `stead worker` imports from exec to a run's first live step, the run
# taken over from a worker that died, for an app that uses no optional
# feature: the features' modules are imported by the first call that uses
# one (an effect, a wait, a model call, an intent, a workspace, a stream,
# a migration, a policy), the client's parts never.
WORKER_UNUSED = (
    "stead.client", "stead.web", "stead.testing", "stead.contrib", "stead.demos",
    "stead.examples", "stead.operator", "stead.views", "stead.dryrun", "stead.retention",
    "stead.migrations", "stead.policy", "stead.guard", "stead.intent", "stead.keys",
    "stead.llm", "stead.workflow.waits", "stead.workflow.workspaces",
    "stead.workflow.revalidation", "stead.workflow.judgements", "stead.files",
    "stead.stream_records", "stead.exports", "stead.searches", "stead.queues",
    "stead.schedules", "stead.schema_check", "stead.policy_binding",
    "stead.records.waits", "stead.records.histories", "stead.cli.runs", "stead.cli.deploy",
)
# The standard library's costly corners no such run needs (the SQLite store's
# -wal watch, opened while the worker waits, loads `ctypes` but not the
# search for a library by name, which runs `ldconfig`).
WORKER_STDLIB = ("email", "tempfile", "shutil", "zipfile", "importlib.resources",
                 "ctypes.util", "pathlib")

WORKER_APP = '''
import json, os, sys

import stead

app = stead.App("pinned")


def double(n: int) -> int:
    return 2 * n


@app.workflow()
async def pinned(run: stead.Run, n: int) -> int:
    first = await run.step("first", double, n)
    if os.environ.get("PIN_CRASH"):  # the first worker dies here, holding the run
        os._exit(3)
    second = await run.step("second", double, first)
    with open(os.environ["PIN_MODULES"], "w") as out:
        json.dump(sorted(sys.modules), out)
    return second
'''


def test_worker_imports_only_what_its_runs_use(tmp_path: Path) -> None:
    (tmp_path / "pinned_app.py").write_text(WORKER_APP)
    db = f"sqlite:///{tmp_path}/stead.db"
    modules = tmp_path / "modules.json"
    stead_cmd = [sys.executable, "-m", "stead", "--db", db]
    env = {**os.environ, "PIN_MODULES": str(modules)}

    def run(*args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*stead_cmd, *args], cwd=tmp_path, capture_output=True,
                              text=True, env={**env, **(extra or {})},
                              timeout=procs.DEADLINE)

    assert run("db", "migrate").returncode == 0
    started = run("start", "-q", "pinned_app:app", "pinned", "[4]")
    assert started.returncode == 0, started.stderr
    # The first worker journals the first step, then dies holding the lease.
    crashed = run("worker", "pinned_app:app", "--until-idle", "--lease", "1",
                  extra={"PIN_CRASH": "1"})
    assert crashed.returncode == 3, crashed.stderr
    assert not modules.exists()
    # A fresh worker takes the run over once the lease ran out, replays the
    # first step and runs the second live.
    done = run("worker", "pinned_app:app", "--until-idle", "--lease", "1")
    assert done.returncode == 0, done.stderr
    found = set(json.loads(modules.read_text()))
    assert "stead.takeover" in found and "stead.store.sqlite" in found
    assert not _under(found, LIBRARIES)
    assert not _under(found, WORKER_UNUSED)
    assert not _under(found, WORKER_STDLIB)
    listed = run("runs", "ls", "--json")
    assert [(r["status"], r["epoch"]) for r in json.loads(listed.stdout)] == [("completed", 2)]
