"""Faults around the workflow: a store that fails mid-run (a full disk), an
effect whose result cannot be stored, an event loop blocked by a workflow, the
database file deleted under a worker, and log lines a log reader can split."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import stead
from stead import logs
from stead.cli import main
from stead.records import Fence, Record, RecordStatus, ResumeRecord, RunStatus
from stead.store.sqlite.connection import translate
from stead.testing import DelegatingStore
from tests.helpers import Calls

FAST = stead.WorkerOptions(poll_interval=0.01, store_backoff=0.05)


# -- a store error is never the workflow's failure ---------------------------------
class FullDisk(DelegatingStore):
    """The disk is full for the first `failures` appends: SQLite answers
    "database or disk is full", which the store reports as StoreUnavailable."""

    def __init__(self, inner: stead.Store, failures: int) -> None:
        super().__init__(inner)
        self.failures = failures

    async def append(self, fence: Fence, records: Sequence[Record],
                     resume: ResumeRecord | None = None) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise translate(sqlite3.OperationalError("database or disk is full"), "stead.db")
        await self.inner.append(fence, records, resume)


async def test_a_full_disk_stops_the_attempt_and_the_run_completes_once_it_is_gone(
    store: stead.Store,
) -> None:
    app = stead.App("t")
    calls = Calls()

    def prepare() -> str:
        calls.hit("prepare")
        return "ready"

    async def charge(op: stead.Operation) -> str:
        calls.hit("charge")
        return "receipt"

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        # Swallowing the error changes nothing: the run goes no further here.
        with contextlib.suppress(stead.StoreError):
            await run.step("prepare", prepare)
        return await run.effect("charge", charge)

    full = FullDisk(store, failures=2)
    assert isinstance(
        translate(sqlite3.OperationalError("database or disk is full"), "x"),
        stead.StoreUnavailable)
    client = stead.Client(full, app)
    info = await client.start(wf)
    await stead.Worker(app, full, FAST).run_until_idle()
    done = await client.get(info.run_id)
    assert done.status == "completed" and done.result == "receipt"
    assert calls == {"prepare": 3, "charge": 1}  # the effect never ran on a failed attempt
    assert done.epoch == 3  # two attempts left for takeover, the third completed


class FullDiskAtRelease(FullDisk):
    """As FullDisk, and the release that follows the failed attempt fails as
    well, `release_failures` times: the run stays leased to its worker."""

    def __init__(self, inner: stead.Store, failures: int, release_failures: int) -> None:
        super().__init__(inner, failures)
        self.release_failures = release_failures
        self.releases_refused = 0

    async def release(self, fence: Fence) -> None:
        if self.release_failures > 0:
            self.release_failures -= 1
            self.releases_refused += 1
            raise translate(sqlite3.OperationalError("database or disk is full"), "stead.db")
        await self.inner.release(fence)


async def test_a_release_that_fails_is_made_again_and_the_worker_is_not_idle_before(
    store: stead.Store,
) -> None:
    """A worker working until idle does not stop beside a run it let go of but
    could not release (it would sit `running` until its lease ran out): it
    releases it once the store takes writes again, and finishes it."""
    app = stead.App("t")
    calls = Calls()

    def prepare() -> str:
        calls.hit("prepare")
        return "ready"

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        return await run.step("prepare", prepare)

    full = FullDiskAtRelease(store, failures=1, release_failures=3)
    client = stead.Client(full, app)
    info = await client.start(wf)
    # The lease is far longer than the test: only the release can free the run.
    options = stead.WorkerOptions(poll_interval=0.01, store_backoff=0.05, lease_seconds=600)
    await asyncio.wait_for(stead.Worker(app, full, options).run_until_idle(), 60)
    done = await client.get(info.run_id)
    assert full.releases_refused == 3
    assert done.status == "completed" and done.result == "ready", done
    assert done.epoch == 2  # released by its worker, then claimed again
    assert calls == {"prepare": 2}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs, where the machine lets a test mount one (root in a
    container that allows it); skipped elsewhere."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here: " + mounted.stderr.decode().strip())
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, check=False)


def _fill(path: Path) -> None:
    """Write to `path` until the disk is full."""
    with open(path, "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass


@pytest.mark.sqlite_only
async def test_a_real_full_disk_leaves_the_run_to_be_finished_once_there_is_room(
    small_disk: Path,
) -> None:
    app = stead.App("t")
    calls = Calls()
    filler = small_disk / "filler"

    def compute() -> str:
        calls.hit("compute")
        if calls["compute"] == 1:
            _fill(filler)  # the disk is full now: this step's record cannot be written
        return "x" * 200_000

    async def charge(op: stead.Operation) -> str:
        calls.hit("charge")
        return "receipt"

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        await run.step("compute", compute)
        return await run.effect("charge", charge)

    store = await stead.open_store(f"sqlite:///{small_disk}/stead.db")
    try:
        client = stead.Client(store, app)
        info = await client.start(wf)
        worker = stead.Worker(app, store, stead.WorkerOptions(
            poll_interval=0.01, store_backoff=0.05, lease_seconds=1.0))
        task = asyncio.create_task(worker.run())
        try:
            for _ in range(500):
                if filler.exists() and calls["compute"] >= 1:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # attempts fail while the disk stays full
            assert (await client.get(info.run_id)).status == "running"  # never failed
            filler.unlink()
            done = await client.wait_for(info.run_id, ["completed"], timeout=30)
        finally:
            worker.stop()
            await task
    finally:
        await store.close()
    assert done.result == "receipt"
    assert calls["charge"] == 1 and calls["compute"] >= 2


async def test_retry_takes_runs_stead_stopped_and_refuses_the_workflows_own_failures(
    store: stead.Store,
) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run, fail: bool) -> str:
        if fail:
            raise ValueError("the workflow says no")
        return "ok"

    client = stead.Client(store, app)
    # A run failed on a store error (as older versions recorded it) is stead's stop.
    by_store = await client.start(wf, False)
    [row] = await store.claim("w", app.hosted(), 30.0, 1)
    await store.finish(Fence(row.run_id, row.epoch, "w"), RunStatus.FAILED, error=json.dumps(
        {"type": "StoreUnavailable", "message": "database or disk is full"}))
    retried = await client.retry(by_store.run_id)
    assert retried.status == "running" and retried.epoch == row.epoch + 1
    own = await client.start(wf, True)
    await stead.Worker(app, store, FAST).run_until_idle()
    assert await client.result(by_store.run_id, timeout=10) == "ok"
    assert (await client.get(own.run_id)).status == "failed"
    with pytest.raises(stead.NotStopped, match="ValueError raised by the workflow"):
        await client.retry(own.run_id)


async def test_retry_asks_again_about_an_unknown_outcome_and_never_resends(
    store: stead.Store,
) -> None:
    app = stead.App("t")
    calls = Calls()

    async def send(op: stead.Operation) -> str:
        calls.hit("send")
        raise stead.OutcomeUncertain("connection dropped after the request")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        return await run.effect("send", send)

    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store, FAST).run_until_idle()
    assert (await client.get(info.run_id)).status == "outcome_unknown"
    assert (await client.retry(info.run_id)).status == "running"
    await stead.Worker(app, store, FAST).run_until_idle()
    assert (await client.get(info.run_id)).status == "outcome_unknown"
    assert calls == {"send": 1}


# -- an effect whose result cannot be stored ---------------------------------------
async def test_an_effect_whose_result_cannot_be_stored_stops_the_run_at_once(
    store: stead.Store,
) -> None:
    app = stead.App("t")
    calls = Calls()

    async def book(op: stead.Operation) -> object:
        calls.hit("book")
        return object()  # happened outside; not JSON

    @app.workflow()
    async def wf(run: stead.Run) -> Any:
        try:
            booked = await run.effect("book", book)
        except Exception:
            booked = None  # the workflow cannot go on past it, even so
        await run.step("after", lambda: calls.hit("after"))
        return booked

    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store, FAST).run_until_idle()
    stopped = await client.get(info.run_id)
    assert stopped.status == "outcome_unknown"
    assert calls == {"book": 1}
    journal = await client.journal(info.run_id)
    assert [r.status for r in journal] == [RecordStatus.INTENT, RecordStatus.UNKNOWN]
    assert "cannot be stored" in json.loads(journal[-1].payload)["reason"]
    unknown = stopped.outcome_unknown
    assert unknown is not None
    assert (unknown.name, unknown.key, unknown.addr, unknown.attempt) == (
        "book", f"{info.run_id}:0", journal[0].addr, 1)
    assert "cannot be stored" in unknown.known

    await client.reconcile(info.run_id, "book", happened={"booking": 7}, by="ops")
    await stead.Worker(app, store, FAST).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == {"booking": 7}
    assert calls == {"book": 1, "after": 1}


# -- a blocked event loop ---------------------------------------------------------------
BLOCKING_WORKER = Path(__file__).parent / "workers" / "blocking_worker.py"


def _start_worker(db_url: str, name: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, str(BLOCKING_WORKER), "--db", db_url, "--lease", "1.0",
             "--id", name],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.slow
async def test_a_run_that_blocks_the_loop_keeps_its_lease_against_a_second_worker(
    db_url: str, tmp_path: Path,
) -> None:
    store = await stead.open_store(db_url)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        client = stead.Client(store)
        info = await client.start("crunch", 3.0, version=1)
        procs.append(_start_worker(db_url, "worker-a", tmp_path / "a.log"))
        running = await client.wait_for(info.run_id, ["running"], timeout=30)
        assert running.lease_owner == "worker-a"
        procs.append(_start_worker(db_url, "worker-b", tmp_path / "b.log"))
        done = await client.wait_for(info.run_id, ["completed"], timeout=60)
    finally:
        for proc in procs:
            _stop(proc)
        await store.close()
    # Worker A held the loop for 3 s with a 1 s lease: its lease was renewed from
    # another thread all along, so worker B never took the run over.
    assert done.epoch <= 2 and done.lease_owner is None
    assert done.epoch == 1
    log = (tmp_path / "a.log").read_text()
    blocked = [line for line in log.splitlines() if "event loop blocked" in line]
    assert blocked, log
    assert f"run {info.run_id}" in blocked[0] and "hog (" in blocked[0]


# -- the database file deleted under a worker ----------------------------------------
@pytest.mark.sqlite_only
async def test_a_worker_stops_when_its_database_file_is_deleted(db_url: str) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        return None

    store = await stead.open_store(db_url)
    try:
        worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01))
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.1)
        path = db_url.removeprefix("sqlite:///")
        os.remove(path)
        with pytest.raises(stead.DatabaseMissing, match="was deleted"):
            await asyncio.wait_for(task, 10)
        # No connection of the worker's (its lease keeper's included) made
        # an empty database in the deleted one's place.
        assert not os.path.exists(path)
    finally:
        await store.close()


@pytest.mark.sqlite_only
async def test_a_second_connection_to_a_deleted_database_does_not_create_one(
        db_url: str) -> None:
    path = db_url.removeprefix("sqlite:///")
    with pytest.raises(stead.DatabaseMissing, match="was deleted"):
        await stead.open_store(db_url, existing=True)
    assert not os.path.exists(path)
    store = await stead.open_store(db_url)  # the first opening creates it
    await store.close()
    twin = await stead.open_store(db_url, existing=True)
    await twin.close()


# -- logs ----------------------------------------------------------------------------------
def _record(message: str, **extra: Any) -> logging.LogRecord:
    record = logging.LogRecord("stead.store", logging.WARNING, __file__, 1, message, (), None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_a_log_record_is_one_line_with_its_run() -> None:
    libpq = "connection failed\nDETAIL:  the server closed it\nHINT:  retry"
    text = logs.TextFormatter().format(_record(libpq, run_id="r1"))
    assert "\n" not in text and "DETAIL:" in text and text.endswith("[run r1]")
    token = logs.current_run.set("r2")
    try:
        data = json.loads(logs.JsonFormatter().format(_record(libpq)))
    finally:
        logs.current_run.reset(token)
    assert data["message"] == libpq and data["run_id"] == "r2"
    assert {"time", "level", "logger", "message"} <= set(data)
    assert data["level"] == "WARNING" and data["logger"] == "stead.store"


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"faultapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "import stead\napp = stead.App('logs')\n\n"
        "@app.workflow()\nasync def hello(run):\n    return 'hi'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    yield name
    sys.modules.pop(name, None)


def test_worker_logs_as_json_lines(app_module: str, sqlite_url: str) -> None:
    runner = CliRunner()
    started = runner.invoke(main, ["--db", sqlite_url, "start", f"{app_module}:app", "hello",
                                   "-q"])
    assert started.exit_code == 0, started.output
    result = runner.invoke(main, ["--db", sqlite_url, "worker", f"{app_module}:app",
                                  "--until-idle", "--poll", "0.01", "--log-format", "json"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines
    parsed = [json.loads(line) for line in lines]
    assert any("started" in p["message"] for p in parsed)
    assert all({"time", "level", "logger", "message"} <= set(p) for p in parsed)



def test_a_json_log_line_about_a_run_names_its_epoch_worker_and_workflow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> None:
    name = f"faultapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "import stead\napp = stead.App('logs')\n\n"
        "@app.workflow()\nasync def boom(run):\n    raise ValueError('no')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    try:
        runner = CliRunner()
        started = runner.invoke(main, ["--db", sqlite_url, "start", f"{name}:app", "boom",
                                       "-q"])
        assert started.exit_code == 0, started.output
        run_id = started.output.strip()
        result = runner.invoke(main, ["--db", sqlite_url, "worker", f"{name}:app",
                                      "--until-idle", "--poll", "0.01", "--log-format", "json",
                                      "--worker-id", "w1"])
    finally:
        sys.modules.pop(name, None)
    assert result.exit_code == 0, result.output
    parsed = [json.loads(line) for line in result.output.splitlines() if line.strip()]
    [failed] = [p for p in parsed if "failed" in p["message"]]
    assert failed["run_id"] == run_id
    assert (failed["epoch"], failed["worker"], failed["workflow"]) == (1, "w1", "boom@1")
