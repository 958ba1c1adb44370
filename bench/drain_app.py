"""The app `python -m bench.drain` runs in its worker processes: `long(n)`
runs n steps of about 20 ms each, every one writing `time pid` to the file
DRAIN_STEPS names, so the bench sees which worker ran which step when."""

from __future__ import annotations

import os
import time

import stead

app = stead.App("drain-bench")


def tick(i: int) -> int:
    with open(os.environ["DRAIN_STEPS"], "a") as f:
        f.write(f"{time.time()} {os.getpid()}\n")
    time.sleep(0.02)
    return i


@app.workflow(version=1)
async def long(run: stead.Run, n: int) -> int:
    for i in range(n):
        await run.step("tick", tick, i)
    return n
