"""The crash matrix's worker processes: forks of a server that imported stead
and the libraries named to preload, each importing the app itself only once
its point's folder and environment are set; the server's own end and death.

(The matrices of the examples, on both stores: tests/test_crash_matrix.py.)
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import stead
from stead.cli import main
from stead.testing import Services, crash_matrix
from stead.testing._processes import WorkerProcesses
from stead.testing.matrix import MAX_PRELOAD
from tests import stress
from tests.workers import chaos_app
from tests.workers.procs import wait_until

PROBE = "tests.workers.probe_app:app"
LIBRARY = "tests.workers.probe_library"


@pytest.fixture
def probe_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "imports.jsonl"
    monkeypatch.setenv("STEAD_PROBE_LOG", str(log))
    for module in ("tests.workers.probe_app", LIBRARY):
        monkeypatch.delitem(sys.modules, module, raising=False)
    return log


def _imports(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


async def test_workers_import_preloads_ahead_and_the_app_in_their_point(
    probe_log: Path, tmp_path: Path
) -> None:
    report = await crash_matrix(
        PROBE, "greet", ["ada"], folder=tmp_path / "matrix", preload=[LIBRARY],
        services=Services(env=lambda folder: {"PROBE_POINT": folder.name}))
    report.assert_ok()
    imports = _imports(probe_log)
    library = {i["pid"] for i in imports if i["module"] == "library"}
    app = [i for i in imports if i["module"] == "app" and i["pid"] != os.getpid()]
    # Once here (checking the name) and once in the server, never in a worker.
    assert len(library) == 2 and os.getpid() in library
    assert not library & {i["pid"] for i in app}
    # The workers (each leaves its log; one the matrix kills as soon as it is
    # started, its run having ended, may not get as far as the app), each in
    # its point's folder with its point's environment, a process of its own.
    workers = len(list((tmp_path / "matrix").glob("*/worker-*.log")))
    assert 1 + len(report.points) <= len(app) <= workers
    assert len({i["pid"] for i in app}) == len(app)
    for i in app:
        assert Path(i["cwd"]).parent == tmp_path / "matrix"
        assert i["point"] == Path(i["cwd"]).name


@pytest.mark.parametrize(("preload", "message"), [
    ("langgraph.graph", "a list of module names, not the string"),
    (["os", "no such module"], "'no such module' is not a module name"),
    (["tests.workers.nothing_here"], "cannot import tests.workers.nothing_here"),
    ([f"m{n}" for n in range(MAX_PRELOAD + 1)], f"at most {MAX_PRELOAD}"),
])
async def test_a_bad_preload_is_refused_before_anything_runs(
    tmp_path: Path, preload: Any, message: str
) -> None:
    with pytest.raises(stead.errors.InvalidInput, match=message):
        await crash_matrix(chaos_app.app, "greet", ["ada"], folder=tmp_path, preload=preload)
    assert not (tmp_path / "workers.log").exists()


def test_stead_chaos_refuses_a_preload_it_cannot_import_in_one_line() -> None:
    result = CliRunner().invoke(main, ["chaos", "tests.workers.chaos_app:app", "greet",
                                       '["ada"]', "--preload", "tests.workers.nothing_here"])
    assert result.exit_code == 1, result.output
    assert "--preload" in result.output and "cannot import tests.workers.nothing_here" \
        in result.output
    assert "Traceback" not in result.output


def _alive(pid: int) -> bool:
    """Whether `pid` runs: a killed worker whose server died stays a zombie
    until whoever inherits it reaps it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


async def _ended(pid: int) -> None:
    await wait_until(f"process {pid} to end", lambda: not _alive(pid),
                     timeout=10 * stress.slow())


def _workers(tmp_path: Path) -> WorkerProcesses:
    return WorkerProcesses("tests.workers.chaos_app:app", f"sqlite:///{tmp_path}/m.db", tmp_path)


async def test_closing_the_server_leaves_no_worker_alive(tmp_path: Path) -> None:
    # The schema, made once here rather than by the workers at once.
    await (await stead.open_store(f"sqlite:///{tmp_path}/m.db")).close()
    workers = _workers(tmp_path)
    procs = [workers.start(tmp_path, f"w{n}", {}, lease=5.0) for n in range(2)]
    assert all(p.poll() is None for p in procs)
    workers.close()
    for p in procs:
        await _ended(p.pid)


async def test_a_server_that_died_is_named_not_waited_for(tmp_path: Path) -> None:
    await (await stead.open_store(f"sqlite:///{tmp_path}/m.db")).close()
    workers = _workers(tmp_path)
    try:
        proc = workers.start(tmp_path, "w", {}, lease=5.0)
        workers._server.send_signal(signal.SIGKILL)
        workers._server.wait(timeout=10 * stress.slow())
        with pytest.raises(stead.SteadError, match="worker server ended"):
            proc.poll()
        await _ended(proc.pid)  # its worker was killed with it
        with pytest.raises(stead.SteadError, match="worker server ended"):
            workers.start(tmp_path, "again", {}, lease=5.0)
    finally:
        workers.close()
