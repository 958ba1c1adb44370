"""A small app for the crash matrix's own tests: a step, then an effect that
is neither idempotent nor checkable (a crash inside its send stops the run for
a human). The effect writes its key to ./sent.log, in the worker's cwd (the
point's folder), which `sent_per_key` counts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import stead

app = stead.App("chaos-tests")


def compose(name: str) -> str:
    return f"hello {name}"


def send(op: stead.Operation, text: str) -> str:
    with open("sent.log", "a") as log:
        log.write(op.key + "\n")
    return f"sent {text!r}"


@app.workflow(version=1)
async def greet(run: stead.Run, name: str) -> str:
    text = await run.step("compose", compose, name)
    sent: str = await run.effect("send", send, text)
    return sent


def sent_per_key(folder: Path) -> dict[str, int]:
    log = folder / "sent.log"
    return dict(Counter(log.read_text().split())) if log.exists() else {}
