"""A workflow whose step name no store keeps as text (a NUL), for
tests/test_input_bounds.py: run by a real `stead worker` process. Each time
the step's function runs it appends a line to $STEAD_TEST_CALLS."""

from __future__ import annotations

import os

import stead

app = stead.App("bounds-process")


def _work() -> str:
    with open(os.environ["STEAD_TEST_CALLS"], "a") as out:
        out.write("ran\n")
    return "done"


@app.workflow()
async def nul_step(run: stead.Run) -> str:
    return await run.step("a\x00b", _work)
