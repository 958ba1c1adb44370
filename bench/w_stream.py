"""stead's durable streams, run in the project's venv as
`python -m bench.w_stream '{"url": URL, "steps": 500, "values": 300, "gap": 0.01}'`
(or `python -m bench.w_stream --table` to measure SQLite and PostgreSQL and
print the rows of bench/RESULTS.md's section 7).

- **Append on the step path.** One run of `steps` trivial async steps, and one
  run of the same steps each followed by `run.stream("s").append(i)`: the
  difference, per step, is what an append costs a workflow.
- **Reader latency.** A run appends `values` values `gap` seconds apart, each
  holding the time it was appended; a reader in another process tails the
  stream with `Client.read_stream` (the default poll), ready before the run
  starts, and notes when each arrives. Append (before its commit) → receipt,
  p50 and p99.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

import stead
from bench import common

app = stead.App("bench-stream")


async def tick(i: int) -> int:
    return i


@app.workflow(version=1)
async def steps(run: stead.Run, n: int, append: bool) -> int:
    s = run.stream("s")
    for i in range(n):
        await run.step("tick", tick, i)
        if append:
            await s.append(i)
    return n


@app.workflow(version=1)
async def paced(run: stead.Run, n: int, gap: float) -> int:
    s = run.stream("s")
    for _ in range(n):
        await s.append(common.now())
        await asyncio.sleep(gap)  # a model's deltas come apart, not in one burst
    await s.close()
    return n


async def _timed(store: stead.Store, n: int, append: bool) -> float:
    client = stead.Client(store, app)
    info = await client.start(steps, n, append)
    t0 = common.now()
    await stead.Worker(app, store, stead.WorkerOptions(concurrency=1)).run_until_idle()
    took = common.now() - t0
    await client.result(info.run_id, timeout=600)
    return took


async def reader(url: str, run_id: str) -> None:
    store = await stead.open_store(url)
    entries = stead.Client(store, app).read_stream(run_id, "s")
    common.emit("READY", {})  # the run starts once its reader reads
    lags = [common.now() - e.value async for e in entries if e.kind == stead.EntryKind.VALUE]
    await store.close()
    common.result({"lags": lags})


async def main_async(job: dict[str, Any]) -> dict[str, Any]:
    store = await stead.open_store(job["url"])
    client = stead.Client(store, app)
    await _timed(store, 1, True)  # schema, warm caches
    bare = await _timed(store, job["steps"], False)
    appending = await _timed(store, job["steps"], True)
    info = await client.start(paced, job["values"], job["gap"])
    read = subprocess.Popen([sys.executable, "-m", "bench.w_stream", "--reader", job["url"],
                             info.run_id], stdout=subprocess.PIPE, text=True)
    assert read.stdout is not None
    assert (await asyncio.to_thread(read.stdout.readline)).startswith("READY")
    await stead.Worker(app, store, stead.WorkerOptions(concurrency=1)).run_until_idle()
    out, _ = read.communicate(timeout=600)
    lags = json.loads(out.split("RESULT ", 1)[1])["lags"]
    await store.close()
    q = statistics.quantiles(lags, n=100)
    return {"step_us": bare / job["steps"] * 1e6, "append_us":
            (appending - bare) / job["steps"] * 1e6, "p50_ms": q[49] * 1e3,
            "p99_ms": q[98] * 1e3, "values": len(lags)}


def _cell(values: list[float], digits: int) -> str:
    return (f"{statistics.median(values):.{digits}f} "
            f"({min(values):.{digits}f}-{max(values):.{digits}f})")


def _table(repeat: int = 3) -> None:
    """The rows of RESULTS.md's section 7: `median (min-max)` of `repeat` runs."""
    job = {"steps": 500, "values": 300, "gap": 0.01}
    rows = []
    for db in ("SQLite", "PostgreSQL"):
        got: list[dict[str, Any]] = []
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as tmp:
                url = (f"sqlite:///{tmp}/stream.db" if db == "SQLite" else
                       os.environ.get("STEAD_BENCH_PG", "postgresql://127.0.0.1:5432/test"))
                got.append(asyncio.run(main_async({**job, "url": url})))
        for key, label, digits in (
                ("step_us", "a step alone: µs per step", 0),
                ("append_us", "an append after each step: µs per append", 0),
                ("p50_ms", "reader in another process, append → receipt p50 (ms)", 1),
                ("p99_ms", "reader in another process, append → receipt p99 (ms)", 1)):
            rows.append(f"|  | {db} | {label} | {_cell([g[key] for g in got], digits)} |")
    print("\n".join(rows))


def main() -> None:
    if sys.argv[1:2] == ["--reader"]:
        asyncio.run(reader(sys.argv[2], sys.argv[3]))
    elif sys.argv[1:2] == ["--table"]:
        _table()
    else:
        common.result(asyncio.run(main_async(common.args())))


if __name__ == "__main__":
    main()
