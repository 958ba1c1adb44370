"""A rolling deploy: workers of the previous release (the code of stead 0.1.0,
schema 28, taken from git) run orders on a database; a worker of this
release starts, migrates the database online (0030 is compatible and
online) while they work, and both go on side by side until the old one is
stopped. The old worker keeps working past the migration, `stead doctor`
shows the mixed fleet, and nothing is lost or done twice: every order
completes, each step ran once and each card was charged once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import stead
from stead.cli import main
from stead.store import schema_versions
from tests import pg, stress
from tests.upgrade import restore, rolling_app

ROOT = Path(__file__).resolve().parents[2]
SLOW = stress.slow()
DEADLINE = 120.0 * SLOW
PREVIOUS = next(f for f in restore.every() if f.schema == 28)  # stead 0.1.0


@pytest.fixture(scope="module")
def old_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's `src`, from git: its commit is the one its
    upgrade fixture was made with."""
    commit = PREVIOUS.described["commit"]
    where = tmp_path_factory.mktemp("old-stead")
    archive = where / "src.tar"
    done = subprocess.run(["git", "archive", "--format=tar", f"--output={archive}", commit,
                           "src"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        why = f"the previous release's commit {commit} is not in this clone: {done.stderr}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {why} (fetch the full history)", pytrace=False)
        pytest.skip(why)
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="data")
    return where / "src"


class Fleet:
    """Worker processes of either release on one database, and their logs."""

    def __init__(self, url: str, tmp: Path, old_src: Path) -> None:
        self.url, self.tmp, self.old_src = url, tmp, old_src
        self.steps, self.ledger = tmp / "steps.log", tmp / "ledger.log"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def env(self, old: bool) -> dict[str, str]:
        path = f"{self.old_src}{os.pathsep}{ROOT}" if old else str(ROOT)
        return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1",
                rolling_app.STEPS: str(self.steps), rolling_app.LEDGER: str(self.ledger)}

    def run(self, old: bool, *args: str) -> str:
        done = subprocess.run([sys.executable, *args], env=self.env(old), cwd=self.tmp,
                              capture_output=True, text=True, timeout=DEADLINE)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def start_orders(self, old: bool, first: int, last: int) -> None:
        self.run(old, "-m", "tests.upgrade.rolling_app", self.url, str(first), str(last))

    def worker(self, name: str, old: bool) -> None:
        with open(self.tmp / f"{name}.log", "wb") as out:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "stead", "--db", self.url, "worker",
                 "tests.upgrade.rolling_app:app", "--worker-id", name, "--concurrency", "4",
                 "--heartbeat", "1", "--log-level", "info"],
                env=self.env(old), cwd=self.tmp, stdout=out, stderr=subprocess.STDOUT)

    def output(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")[-4000:]

    def stop(self, name: str) -> int:
        proc = self.procs[name]
        proc.send_signal(signal.SIGTERM)
        return proc.wait(DEADLINE)

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def ran(self) -> list[tuple[int, str, str, int]]:
        """Each step run: by which process, of which run, which step, of which order."""
        lines = self.steps.read_text().splitlines() if self.steps.exists() else []
        return [(int(pid), run, name, int(k)) for pid, run, name, k in map(str.split, lines)]


@pytest.fixture
def database(backend: str, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path}/stead.db"
        return
    with pg.fresh_schema(new=True) as url:  # the old release makes it
        yield url


@pytest.mark.slow
async def test_old_and_new_workers_share_a_database_through_its_migration(
    database: str, tmp_path: Path, old_src: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STEAD_SECRET", "rolling")
    monkeypatch.delenv(schema_versions.ENV, raising=False)
    fleet = Fleet(database, tmp_path, old_src)
    try:
        # The previous release made the database and started the first orders.
        which = fleet.run(True, "-c", "import stead; print(stead.__version__, stead.__file__)")
        assert which.startswith("0.1.0 ") and str(old_src) in which, which
        fleet.start_orders(True, 0, 30)
        assert _schema(database) == PREVIOUS.schema
        fleet.worker("old", old=True)
        await _until(lambda: _done(database) >= 5, "the old worker to complete 5 orders")

        fleet.worker("new", old=False)  # migrates on open, online
        await _until(lambda: _schema(database), "the new worker to migrate",
                     want=schema_versions.latest())
        fleet.start_orders(False, 30, 60)  # this release's client
        fleet.start_orders(True, 60, 70)  # and the previous one's, on the migrated database
        old_pid = fleet.procs["old"].pid
        await _until(lambda: any(pid == old_pid and k >= 30 for pid, _r, _n, k in fleet.ran()),
                     "the old worker to take an order started after the migration")
        await _until(lambda: _both_heard(database), "both workers' heartbeats")
        doctor = await asyncio.to_thread(CliRunner().invoke, main,
                                         ["--db", database, "doctor", "--grace", "30"])
        assert "a mixed fleet: 2 releases run" in doctor.output, doctor.output
        assert "old: order@1 (stead before 0.2.0)" in doctor.output
        assert f"new: order@1 (stead {stead.__version__}, schema " in doctor.output

        assert fleet.stop("old") == 0, fleet.output("old")
        await _until(lambda: _done(database) >= 70, "every order to complete")
        assert fleet.stop("new") == 0, fleet.output("new")
    finally:
        fleet.kill_all()

    store = await stead.open_store(database)
    try:
        client = stead.Client(store)
        infos = {i.task_id: i for i in await client.list_runs(limit=100)}
        assert len(infos) == 70
        for k in range(70):
            result = await client.result(infos[f"order-{k}"].run_id, timeout=5)
            assert result["k"] == k and result["total"] == rolling_app.expected(k)
    finally:
        await store.close()
    steps = Counter((run, name) for _pid, run, name, _k in fleet.ran())
    assert set(steps.values()) == {1}, [s for s, n in steps.items() if n > 1]
    assert len(steps) == 70 * len(rolling_app.NAMES)
    charged = Counter(line.split()[1] for line in fleet.ledger.read_text().splitlines())
    assert len(charged) == 70 and set(charged.values()) == {1}
    by = Counter(pid for pid, _run, _name, _k in fleet.ran())
    assert len(by) == 2, by  # both releases did work


async def _until(probe: object, what: str, want: object = True) -> None:
    assert callable(probe)
    deadline = time.monotonic() + DEADLINE
    while True:
        got = probe()
        if asyncio.iscoroutine(got):
            got = await got
        if got == want:
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def _schema(url: str) -> int:
    [(version,)] = restore.query(url, "SELECT max(version) FROM stead_schema")
    return int(version)


def _done(url: str) -> int:
    [(count,)] = restore.query(url, "SELECT count(*) FROM runs WHERE status = 'completed'")
    return int(count)


def _both_heard(url: str) -> bool:
    heard = restore.query(url, "SELECT DISTINCT worker_id FROM worker_hosts")
    return {worker_id for (worker_id,) in heard} >= {"old", "new"}


@pytest.mark.slow
async def test_a_worker_the_schema_moved_past_stops_and_says_what_to_do(
    database: str, tmp_path: Path, old_src: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STEAD_SECRET", "rolling")
    fleet = Fleet(database, tmp_path, old_src)
    try:
        fleet.start_orders(False, 0, 3)
        fleet.worker("current", old=False)
        await _until(lambda: _done(database) >= 3, "the worker to complete 3 orders")
        # A later release applies a breaking migration (as `stead db migrate` would
        # once no older worker is live: this one's heartbeat is seen, so by force).
        restore.query(database, "INSERT INTO stead_schema (version, name, compatible, "
                                "applied_at, stead_version) VALUES (%s, 'rename', %s, 0, "
                                "'0.3.0')", schema_versions.latest() + 1, False)
        proc = fleet.procs["current"]
        code = await asyncio.to_thread(proc.wait, DEADLINE)
        assert code == 1, fleet.output("current")
        said = [line for line in fleet.output("current").splitlines() if "stops:" in line]
        assert len(said) == 1, fleet.output("current")
        assert f"the database is at schema {schema_versions.latest() + 1}, newer than this " \
               f"stead ({stead.__version__}, schema {schema_versions.latest()})" in said[0]
        assert "Upgrade it to stead 0.3.0 or later" in said[0]
    finally:
        fleet.kill_all()
