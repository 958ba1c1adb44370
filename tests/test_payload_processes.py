"""Payloads at rest with real processes, on both stores: a re-encryption
killed with SIGKILL and run again loses nothing, beside a live writer; a
task forgotten while a worker process runs it stops at once and nothing of
it is opened afterwards."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import stead
from stead import keys, payloads
from stead.records import RunStatus
from tests import pg

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
EMAIL = "alice@example.com"
PATIENCE = 60.0


@pytest.fixture
def key_file(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's key file (one signing key, one data key), for it and the
    processes it starts."""
    path = tmp_path / "test.keys"
    keys.add_key(path)
    keys.rotate(path)
    monkeypatch.setenv(keys.KEY_FILE_ENV, str(path))
    monkeypatch.setenv("STEAD_ENCRYPT", "1")
    monkeypatch.setenv("STEAD_DATABASE_URL", db_url)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    return path


def _stead(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "stead", *args], stdout=out,
                                stderr=subprocess.STDOUT)


async def _until(what: str, done: Callable[[], Awaitable[bool]]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not await done():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {PATIENCE}s for {what}")
        await asyncio.sleep(0.01)


async def test_a_killed_reencryption_run_again_loses_nothing(
    db_url: str, key_file: Path, tmp_path: Path,
) -> None:
    store = await stead.open_store(db_url)
    client = stead.Client(store)
    started = [(await client.start("chatty", f"{i}-{EMAIL}", version=1)).run_id
               for i in range(300)]
    old = keys.read_file(key_file).current_data
    new = keys.rotate(key_file)
    rewrap = _stead("keys", "reencrypt", "--batch", "1", log=tmp_path / "first.log")
    try:
        # A live writer beside it: runs started meanwhile (this store still
        # wraps with the old key, as a worker not yet restarted does). The
        # pass rests between batches, so no start waits out more than a few
        # of them (a pass that held SQLite's write lock batch after batch
        # kept a start out until it had rewrapped every key).
        moved, jumps = 0, []
        while moved < 30:
            started.append((await client.start("chatty", f"{len(started)}-{EMAIL}",
                                               version=1)).run_id)
            assert rewrap.poll() is None, (tmp_path / "first.log").read_text()
            now = (await store.payload_key_counts()).get(new.id, 0)
            jumps.append(now - moved)
            moved = now
        assert max(jumps) < 150, jumps
        rewrap.send_signal(signal.SIGKILL)
        assert rewrap.wait(timeout=PATIENCE) == -signal.SIGKILL
    finally:
        if rewrap.poll() is None:
            rewrap.kill()
    counts = await store.payload_key_counts()
    assert counts.get(old.id, 0) > 0 and counts.get(new.id, 0) >= 30, counts
    again = _stead("keys", "reencrypt", "--batch", "7", log=tmp_path / "again.log")
    assert again.wait(timeout=PATIENCE * 2) == 0, (tmp_path / "again.log").read_text()
    assert await store.payload_key_counts() == {new.id: len(started)}
    await store.close()
    # The old data key retired: every run still opens, none lost or garbled.
    ring = keys.read_file(key_file)
    retired = keys.Keyring(ring.keys, data_keys=(ring.current_data,))
    store = await stead.open_store(db_url, keys=retired, payloads=True)
    try:
        for i, run_id in enumerate(started):
            assert f'"{i}-{EMAIL}"' in (await store.get_run(run_id)).input
    finally:
        await store.close()


async def test_forgetting_a_live_run_stops_it_and_opens_nothing_after(
    db_url: str, backend: str, key_file: Path, tmp_path: Path,
) -> None:
    store = await stead.open_store(db_url)
    client = stead.Client(store)
    info = await client.start("chatty", EMAIL, version=1, task_id="cust-live")
    worker = _stead("worker", "tests.payload_app:app", "--lease", "5",
                    log=tmp_path / "worker.log")
    try:
        async def journaling() -> bool:
            return (await store.journal_size(info.run_id))[0] >= 6

        await _until("the run to journal its first steps", journaling)
        done = await client.forget("cust-live", why="erasure request 7", by="dpo")
        assert done.ended == (info.run_id,) and done.keys_destroyed
        size = await store.journal_size(info.run_id)
        await asyncio.sleep(1.5)  # its steps take 50 ms each: it would have gone on
        assert await store.journal_size(info.run_id) == size
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        run = await store.get_run(info.run_id)
        assert run.status == RunStatus.FAILED and "RunForgotten" in (run.error or "")
        journal = await store.load_journal(info.run_id)
        assert journal and all(payloads.is_forgotten(r.payload) for r in journal)
        entries = await store.read_stream(info.run_id, "notes")
        assert entries and all(payloads.is_forgotten(e.text) for e in entries)
        with pytest.raises(stead.errors.RunForgotten):
            await client.fork(info.run_id)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=PATIENCE)
        await store.close()
    log = (tmp_path / "worker.log").read_text()
    assert EMAIL not in log
    if backend == "sqlite":
        path = Path(db_url.removeprefix("sqlite:///"))
        stored = b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
    else:
        dump = subprocess.run(["pg_dump", "--data-only",
                               f"--schema={pg.query_param(db_url, 'schema')}", pg.URL],
                              capture_output=True, timeout=120, check=True)
        stored = dump.stdout
    assert EMAIL.encode() not in stored
