"""The -wal and -shm files of an SQLite database deleted under a running
worker process: the worker notices at its next claim and stops loudly (exit
1, saying which file), its own commits reach the database file as it closes,
and a `stead start` made meanwhile either fails, saying why, or is durable:
never acknowledged and then lost."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import stead
from tests import ops_app
from tests.workers.procs import DEADLINE, wait_until


def _stead(tmp_path: Path, db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stead", "--db", db_url, *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=DEADLINE,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


async def _run(db_url: str, run_id: str) -> stead.RunInfo | None:
    store = await stead.open_store(db_url)
    try:
        found = await stead.Client(store).list_runs(limit=100)
        return next((info for info in found if info.run_id == run_id), None)
    finally:
        await store.close()


@pytest.mark.sqlite_only
async def test_a_worker_stops_when_its_wal_is_deleted_and_no_start_is_lost(
    tmp_path: Path, db_url: str,
) -> None:
    (tmp_path / "walapp.py").write_text(ops_app.APP_SOURCE)
    path = Path(db_url.removeprefix("sqlite:///"))
    log = tmp_path / "worker.log"
    with open(log, "w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "stead", "--db", db_url, "worker", "walapp:app",
             "--poll", "0.05"],
            cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        await wait_until("the worker to start", lambda: "started" in log.read_text())
        first = _stead(tmp_path, db_url, "start", "walapp:app", "hello", '["ada"]', "-q")
        assert first.returncode == 0, first.stderr
        first_id = first.stdout.strip()

        async def completed() -> bool:
            info = await _run(db_url, first_id)
            return info is not None and info.status == "completed"
        await wait_until("the first run to complete", completed)

        for suffix in ("-wal", "-shm"):
            os.remove(f"{path}{suffix}")
        second = _stead(tmp_path, db_url, "start", "walapp:app", "hello", '["bob"]', "-q")
        try:
            code = worker.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the worker went on:\n{log.read_text()}") from None
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait()
    output = log.read_text()
    assert code == 1, output
    told = [line for line in output.splitlines() if "-wal file was deleted" in line]
    assert len(told) == 1 and "ERROR" in told[0] and "stops" in told[0], output
    # What the worker committed reached the database file as it closed.
    done = await _run(db_url, first_id)
    assert done is not None and done.status == "completed"
    if second.returncode == 0:  # acknowledged: it is there
        assert await _run(db_url, second.stdout.strip()) is not None, second
    else:  # refused, saying why, and nothing is half there
        assert "missing while another process has the database open" in second.stderr


HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("CREATE TABLE held (x)")
conn.execute("INSERT INTO held VALUES (1)")
print("holding", flush=True)
sys.stdin.readline()
conn.execute("INSERT INTO held VALUES (2)")
conn.close()
"""


@pytest.mark.sqlite_only
async def test_a_database_whose_wal_was_deleted_under_another_process_is_not_opened(
    db_url: str,
) -> None:
    path = db_url.removeprefix("sqlite:///")
    await (await stead.open_store(db_url)).close()  # a stead database, in WAL mode
    with subprocess.Popen([sys.executable, "-c", HOLDER, path], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout is not None and holder.stdin is not None
            assert holder.stdout.readline().strip() == "holding"
            for suffix in ("-wal", "-shm"):
                os.remove(f"{path}{suffix}")
            with pytest.raises(stead.DatabaseMissing, match="-wal and -shm file is missing "
                               "while another process has the database open"):
                await stead.open_store(db_url)
            assert not os.path.exists(f"{path}-wal")  # nothing made beside it
            holder.stdin.write("\n")
            holder.stdin.flush()
            assert holder.wait(timeout=DEADLINE) == 0
        finally:
            if holder.poll() is None:
                holder.kill()
    # Once the holder closed (copying its commits into the file), it opens.
    store = await stead.open_store(db_url)
    await store.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT x FROM held ORDER BY x").fetchall() == [(1,), (2,)]
