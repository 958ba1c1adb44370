"""A worker freezes its process's warmed-up heap before its first claim
(`stead.worker.heap`), once per process, unless told not to; each case runs
in a fresh interpreter, since a freeze lasts as long as the process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_SCRIPT = """
import asyncio, gc, sys
import stead

freezes = []
_freeze = gc.freeze
gc.freeze = lambda: (freezes.append(1), _freeze())[1]
app = stead.App("heap")

@app.workflow()
async def hello(run: stead.Run) -> str:
    return await run.step("greet", lambda: "hi")

async def main(path: str, freeze: bool) -> None:
    store = await stead.open_store(f"sqlite:///{path}")
    try:
        client = stead.Client(store, app)
        options = stead.WorkerOptions(freeze_heap=freeze)
        for _ in range(2):  # a second worker of the process freezes nothing more
            run = await client.start(hello)
            await stead.Worker(app, store, options).run_until_idle()
            assert (await client.result(run.run_id, timeout=30)) == "hi"
            print(len(freezes), gc.get_freeze_count(), flush=True)
    finally:
        await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2] == "1"))
"""


def _frozen(tmp_path: Path, freeze: bool) -> list[tuple[int, int]]:
    """Freezes made and objects frozen, after each of two workers."""
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / "heap.db"),
                           "1" if freeze else "0"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [(int(a), int(b)) for a, b in (line.split() for line in done.stdout.splitlines())]


def test_a_worker_freezes_the_warmed_heap_once_per_process(tmp_path: Path) -> None:
    (made, frozen), (made_later, _) = _frozen(tmp_path, True)
    assert made == 1 and frozen > 1000  # stead, the app and the store's objects
    assert made_later == 1


def test_freeze_heap_false_leaves_the_collector_alone(tmp_path: Path) -> None:
    assert _frozen(tmp_path, False) == [(0, 0), (0, 0)]
