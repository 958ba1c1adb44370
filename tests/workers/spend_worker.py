"""A worker process whose workflow asks an offline model twice, a step between
(tests/test_spend_processes.py). The tenant's spend is reserved before each
call is sent.

    python spend_worker.py --db URL --dir DIR

Files in DIR: model.log (the model's ledger: a line per call sent), gate (the
model answers only once it exists: until then a call is in flight),
kill-after (the step after the first answer SIGKILLs its process, once:
killed marks it done).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import stead

DIR = Path(".")
app = stead.App("spend")
USAGE = stead.Usage(input_tokens=30, output_tokens=70)


class LedgerModel:
    """Writes each call to the ledger, then answers once the gate is open."""

    name = "ledger-model"

    async def complete(self, messages: Any, **params: Any) -> stead.Completion:
        with open(DIR / "model.log", "a") as f:
            f.write(f"{messages[-1]['content']}\n")
        while not (DIR / "gate").exists():
            await asyncio.sleep(0.02)
        return stead.Completion(text=f"answer to {messages[-1]['content']}", model=self.name,
                                usage=USAGE)


def after_first() -> str:
    if (DIR / "kill-after").exists() and not (DIR / "killed").exists():
        (DIR / "killed").touch()
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)
    return "on"


@app.workflow()
async def talk(run: stead.Run) -> list[str]:
    model = LedgerModel()
    first = await run.llm("first", model, [{"role": "user", "content": "first"}],
                          max_tokens=100)
    await run.step("after_first", after_first)
    second = await run.llm("second", model, [{"role": "user", "content": "second"}],
                           max_tokens=100)
    return [first.text, second.text]


async def main(db: str) -> None:
    store = await stead.open_store(db)
    worker = stead.Worker(app, store, stead.WorkerOptions(lease_seconds=1.0,
                                                          poll_interval=0.05))
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.stop)
    try:
        await worker.run_until_idle()
    finally:
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    DIR = Path(args.dir)
    asyncio.run(main(args.db))
