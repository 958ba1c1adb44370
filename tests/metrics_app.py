"""An app for tests/test_metrics_processes.py: `pay` sends one effect that
holds until the file METRICS_GATE names exists, after writing the sending
worker's pid to METRICS_SENDING, so the test knows which worker to SIGKILL
while the effect is in flight."""

from __future__ import annotations

import os
import time
from pathlib import Path

import stead

app = stead.App("metrics")


def send(op: stead.Operation, amount: int) -> str:
    Path(os.environ["METRICS_SENDING"]).write_text(str(os.getpid()))
    gate = Path(os.environ["METRICS_GATE"])
    while not gate.exists():  # the test's signal, not a timing guess
        time.sleep(0.05)
    return f"paid {amount}"


@app.workflow()
async def pay(run: stead.Run, amount: int) -> str:
    return str(await run.effect("pay", send, amount))
