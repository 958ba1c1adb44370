"""One process of `bench/large_values.py`: `produce` starts a run whose
step returns a string of N bytes and runs a worker until that step is
journaled, then exits at once (holding the run); `replay` runs a worker that
takes the run over, replays the step (its value read back) and completes it.
Argv: PHASE URL N BLOBS (BLOBS empty: values inline, as before issue 35)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import stead

app = stead.App("bench_large")
LIMIT = 512 * 1024 * 1024  # the hard cap, raised above every size measured


def stop() -> None:
    if os.environ.get("BENCH_LARGE_STOP"):
        os._exit(0)  # the value is journaled: the producer's peak is what it took


@app.workflow()
async def big(run: stead.Run, n: int) -> int:
    value = await run.step("make", lambda: "x" * n)
    await run.step("stop", stop)
    return len(value)


async def main(phase: str, url: str, n: int, blobs: str) -> None:
    store = await stead.open_store(url, blobs=blobs)
    try:
        worker = stead.Worker(app, store, stead.WorkerOptions(max_result_bytes=LIMIT,
                                                              lease_seconds=2.0))
        if phase == "produce":
            await stead.Client(store, app).start("big", n)
            os.environ["BENCH_LARGE_STOP"] = "1"
            await worker.run_until_idle()
            raise SystemExit("the produce phase did not stop after its step")
        began = time.perf_counter()
        await worker.run_until_idle()
        took = time.perf_counter() - began
        [row] = await store.list_runs(limit=1)
        assert row.status == "completed" and row.result == str(n), (row.status, row.error)
        print("RESULT " + json.dumps({"seconds": took}))
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
