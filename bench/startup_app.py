"""The app `python -m bench.startup` runs `stead worker` on: one workflow that
writes the CPU time its process has used so far (user + system, every
thread: `time.process_time()`) when the worker enters it and when its first
step runs, as JSON to the file `BENCH_ENTERED` names. With `BENCH_CRASH`
set, the process exits after that step instead, holding the run's lease: the
next worker takes the run over. The module imports nothing but stead, so
these figures are the worker's own start-up, with no user library in them
(the interpreter's own start, about 12 ms, is in them)."""

from __future__ import annotations

import json
import os
import time

import stead

app = stead.App("startup")


@app.workflow()
async def entered(run: stead.Run) -> None:
    at = {"entered": time.process_time()}

    def first() -> None:
        at["step"] = time.process_time()

    await run.step("first", first)
    if os.environ.get("BENCH_CRASH"):
        os._exit(3)  # dies holding the lease, as a SIGKILLed worker does
    with open(os.environ["BENCH_ENTERED"], "w") as out:
        json.dump(at, out)
