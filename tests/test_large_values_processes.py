"""A worker SIGKILLed between a large value's blob and its reference, on both
stores, with real worker processes: the blob is an orphan (no run owns it),
the run resumes on a new worker and completes with a value it made, and
`stead blobs gc` removes the orphan, nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import stead
from tests.workers import large_app
from tests.workers.procs import DEADLINE, KILLED, wait_until

pytestmark = pytest.mark.slow
TOP = Path(__file__).parent.parent  # where `tests.workers` imports from
INLINE = 4096


def _worker(tmp: Path, url: str, blobs: Path, label: str, *,
            kill: bool) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "STEAD_BLOBS": str(blobs),
           "STEAD_INLINE_BYTES": str(INLINE),
           "PYTHONPATH": os.pathsep.join([str(TOP), os.environ.get("PYTHONPATH", "")])}
    env.pop(large_app.KILL_ENV, None)
    if kill:
        env[large_app.KILL_ENV] = "1"
    with open(tmp / f"worker-{label}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "stead", "--db", url, "worker", "tests.workers.large_app:app",
             "--lease", "1", "--poll", "0.05", "--worker-id", f"worker-{label}"],
            cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT)


def _files(blobs: Path) -> list[str]:
    return sorted(p.name for p in blobs.rglob("*") if p.is_file())


async def test_a_kill_between_blob_and_reference_leaves_an_orphan_gc_removes(
    db_url: str, tmp_path: Path,
) -> None:
    blobs = tmp_path / "blobs"
    ledger = tmp_path / "ledger"
    store = await stead.open_store(db_url, blobs=str(blobs), inline_bytes=INLINE)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        client = stead.Client(store, large_app.app)
        run_id = (await client.start("bulky", 100_000, str(ledger))).run_id
        first = _worker(tmp_path, db_url, blobs, "a", kill=True)
        procs.append(first)
        assert first.wait(timeout=DEADLINE) == KILLED
        [orphan] = _files(blobs)  # durable, and named by nothing
        assert not [r for r in await store.load_journal(run_id) if r.name == "fetch"
                    and r.status == "ok"]
        dry = await store.collect_blobs(grace=0, dry_run=True)
        assert dry.orphans == [orphan]

        second = _worker(tmp_path, db_url, blobs, "b", kill=False)
        procs.append(second)

        async def ended() -> bool:
            return (await client.get(run_id)).done

        await wait_until("the run to complete on the second worker", ended)
        result = await client.result(run_id)
        assert result == {"size": 100_000 + len(str(second.pid)) + 1, "pid": second.pid}
        assert ledger.read_text().splitlines() == [f"fetch {first.pid}", f"fetch {second.pid}"]
        # The second worker's step value is owned; the first's is not.
        assert orphan in _files(blobs) and len(_files(blobs)) == 2
        done = await store.collect_blobs(grace=0)
        assert done.orphans == [orphan]
        assert orphan not in _files(blobs) and len(_files(blobs)) == 1
        assert await client.result(run_id) == result
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        await store.close()


async def test_a_kill_between_a_state_s_blob_and_its_commit_leaves_an_orphan_gc_removes(
    db_url: str, tmp_path: Path,
) -> None:
    """The same for a large task state: the first worker dies once the new
    state's blob is durable, before the transaction that locks the task; the
    state is still unwritten, the blob an orphan; the second worker writes
    its own state, which reads back, and gc removes only the orphan."""
    blobs = tmp_path / "blobs"
    store = await stead.open_store(db_url, blobs=str(blobs), inline_bytes=INLINE)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        client = stead.Client(store, large_app.app)
        run_id = (await client.start("stateful", 100_000, task_id="doc-1")).run_id
        first = _worker(tmp_path, db_url, blobs, "a", kill=True)
        procs.append(first)
        assert first.wait(timeout=DEADLINE) == KILLED
        [orphan] = _files(blobs)
        assert await store.read_state("doc-1") is None  # no reference without its blob
        assert (await store.collect_blobs(grace=0, dry_run=True)).orphans == [orphan]

        second = _worker(tmp_path, db_url, blobs, "b", kill=False)
        procs.append(second)

        async def ended() -> bool:
            return (await client.get(run_id)).done

        await wait_until("the run to complete on the second worker", ended)
        result = await client.result(run_id)
        assert result["version"] == 1 and result["size"] == 100_000 + 37
        facts = await client.task_state("doc-1")
        assert facts.data == {"doc": f"{result['stamp']}:" + "s" * 100_000}
        # The second worker's state and journal record are owned; the first's state is not.
        assert orphan in _files(blobs) and len(_files(blobs)) == 3
        done = await store.collect_blobs(grace=0)
        assert done.orphans == [orphan] and orphan not in _files(blobs)
        assert (await client.task_state("doc-1")).data == facts.data
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        await store.close()
