"""What saving a workspace with each step costs the step path, run in the
project's venv as `python -m bench.w_step_save '{"url": URL, "steps": 200,
"files": 200, "scratch": DIR}'` (or `python -m bench.w_step_save --table` to
measure SQLite and PostgreSQL and print the rows of bench/RESULTS.md's
section 8).

A tree of `files` files of 4 KiB each is made. Three runs of `steps` sync
steps, each step rewriting one file of the tree with new content:

- **no workspace**: the tree is not attached; the step only writes the file.
- **one file changed**: the tree is attached (`run.workspace`): after each
  step it is scanned and, changed, saved with the step's record in one fenced
  transaction (the one new blob stored, the 199 others found by hash).
- **nothing changed**: the tree is attached and each step writes the file's
  content as it already is: the scan finds the tree as last known and only
  the step's record is written.

The differences per step with the first run are what a step that touches the
tree pays for its save.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import stead
from bench import common

app = stead.App("bench-step-save")
SIZE = 4096


def write_file(path: str, i: int, same: bool) -> int:
    content = b"x" * SIZE if same else f"step {i}\n".encode().ljust(SIZE, b".")
    Path(path, "f000.txt").write_bytes(content)
    return i


@app.workflow(version=1)
async def touching(run: stead.Run, path: str, root: str, n: int, attach: bool,
                   same: bool) -> int:
    where: Any = path
    if attach:
        ws = await run.workspace("tree", path, root=root)
        where = ws.path
    for i in range(n):
        await run.step("edit", write_file, str(where), i, same)
    return n


def make_tree(where: Path, files: int) -> None:
    where.mkdir(parents=True)
    for i in range(files):
        sub = where / f"d{i % 10}"
        sub.mkdir(exist_ok=True)
        # f000.txt is the file each step writes; the "nothing changed" run
        # writes this very content again.
        content = b"x" * SIZE if i == 0 else os.urandom(SIZE // 2).hex().encode()
        (where if i == 0 else sub).joinpath(f"f{i:03d}.txt").write_bytes(content)


async def _timed(store: stead.Store, tree: Path, root: Path, n: int, attach: bool,
                 same: bool) -> float:
    client = stead.Client(store, app)
    info = await client.start(touching, str(tree), str(root), n, attach, same)
    t0 = common.now()
    await stead.Worker(app, store, stead.WorkerOptions(concurrency=1)).run_until_idle()
    took = common.now() - t0
    await client.result(info.run_id, timeout=600)
    return took


async def main_async(job: dict[str, Any]) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(dir=job["scratch"]))
    try:
        tree = scratch / "tree"
        make_tree(tree, job["files"])
        n = job["steps"]
        store = await stead.open_store(job["url"])
        await _timed(store, tree, scratch, 2, True, False)  # schema, warm caches
        bare = await _timed(store, tree, scratch, n, False, False)
        changed = await _timed(store, tree, scratch, n, True, False)
        same = await _timed(store, tree, scratch, n, True, True)
        await store.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"step_us": bare / n * 1e6, "changed_us": (changed - bare) / n * 1e6,
            "same_us": (same - bare) / n * 1e6}


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def _table(repeat: int = 3) -> None:
    """The rows of RESULTS.md's section 8: `median (min-max)` of `repeat` runs."""
    rows = []
    for db in ("SQLite", "PostgreSQL"):
        got: list[dict[str, Any]] = []
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as tmp:
                url = (f"sqlite:///{tmp}/save.db" if db == "SQLite" else
                       os.environ.get("STEAD_BENCH_PG", "postgresql://127.0.0.1:5432/test"))
                got.append(asyncio.run(main_async(
                    {"url": url, "steps": 200, "files": 200, "scratch": tmp})))
        for key, label in (
                ("step_us", "a step writing one file, no workspace: µs per step"),
                ("changed_us", "added per step, workspace attached, one file changed (µs)"),
                ("same_us", "added per step, workspace attached, nothing changed (µs)")):
            rows.append(f"|  | {db} | {label} | {_cell([g[key] for g in got])} |")
    print("\n".join(rows))


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        _table()
    else:
        common.result(asyncio.run(main_async(common.args())))


if __name__ == "__main__":
    main()
