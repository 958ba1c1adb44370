"""stead's workspace snapshots, run in the project's venv as
`python -m bench.w_workspace '{"url": ..., "mb": 200, "files": 200, "scratch": DIR}'`.

A tree of `files` files of random bytes (incompressible), `mb` MB in all, is
attached to a run and saved; then one file is changed and it is saved again
(the unchanged blobs are not stored twice); then the last snapshot is
restored into a fresh directory, as a takeover does, checked against its hash.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import stead
from bench import common
from stead.files import trees

app = stead.App("bench-workspace")
timings: dict[str, float] = {}


@app.workflow(version=1)
async def snapshot(run: stead.Run, path: str, root: str) -> list[str]:
    ws = await run.workspace("tree", path, root=root, max_bytes=None)
    t0 = common.now()
    first = await ws.save()
    timings["first"] = common.now() - t0
    changed = Path(path, "f00000.bin")
    changed.write_bytes(os.urandom(changed.stat().st_size))
    t0 = common.now()
    second = await ws.save()
    timings["second"] = common.now() - t0
    return [first.tree, second.tree]


def make_tree(where: Path, mb: int, files: int) -> None:
    size = mb * 1024 * 1024 // files
    where.mkdir(parents=True)
    for i in range(files):
        sub = where / f"d{i % 10}"
        sub.mkdir(exist_ok=True)
        (sub if i else where).joinpath(f"f{i:05d}.bin").write_bytes(os.urandom(size))


async def main_async(job: dict[str, Any]) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(dir=job["scratch"]))
    try:
        tree = scratch / "tree"
        make_tree(tree, job["mb"], job["files"])
        store = await stead.open_store(job["url"])
        client = stead.Client(store, app)
        await client.start(snapshot, str(scratch / "none"), str(scratch))  # schema, first row
        before = common.used_bytes(job["url"])
        info = await client.start(snapshot, str(tree), str(scratch))
        await stead.Worker(app, store, stead.WorkerOptions(concurrency=1)).run_until_idle()
        await client.result(info.run_id, timeout=600)
        after = common.used_bytes(job["url"])
        first, second = await client.snapshots(info.run_id)
        t0 = common.now()
        await client.restore_workspace(info.run_id, "tree", scratch / "restored")
        restore = common.now() - t0
        same = trees.scan(scratch / "restored").sha256 == second.tree
        await store.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"tree_bytes": first.bytes, "files": first.files,
            "first_seconds": timings["first"], "first_stored": first.stored_bytes,
            "second_seconds": timings["second"], "second_stored": second.stored_bytes,
            "db_growth": after - before, "restore_seconds": restore, "restored_equal": same}


def main() -> None:
    common.result(asyncio.run(main_async(common.args())))


if __name__ == "__main__":
    main()
