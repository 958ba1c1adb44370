"""A real worker process for the stream crash tests.

    python stream_worker.py --db URL [--hang-after N]

Its workflow streams a model's answer word by word to the run's stream
"answer". With --hang-after N the model stops after its N-th delta and hangs
(the test SIGKILLs the process there: a worker dying mid-answer); without it
the model answers in full and the worker exits once the run has ended.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import stead
from stead.records import TERMINAL

app = stead.App("stream-tests")
WORDS = ["The", " answer", " is", " forty", "-two", "."]


class _Config:
    hang_after: int | None = None


CONFIG = _Config()


class WordModel:
    """A model that streams its answer a word at a time."""

    name = "words"

    async def complete(self, messages: Sequence[Mapping[str, Any]], *,
                       on_text: stead.Stream, **params: Any) -> stead.Completion:
        for i, word in enumerate(WORDS):
            if CONFIG.hang_after is not None and i == CONFIG.hang_after:
                await asyncio.Event().wait()  # mid-answer, until SIGKILL
            await on_text(word)
        return stead.Completion(text="".join(WORDS))


@app.workflow(version=1)
async def answer(run: stead.Run, question: str) -> str:
    status = run.stream("status")
    await status.append("thinking")
    said = await run.llm("answer", WordModel(), [{"role": "user", "content": question}],
                         on_text=run.stream("answer"))
    await run.stream("answer").close()
    await status.append("done")
    await status.close()
    return said.text


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--hang-after", type=int)
    args = p.parse_args()
    CONFIG.hang_after = args.hang_after
    store = await stead.open_store(args.db)
    worker = stead.Worker(app, store, stead.WorkerOptions(lease_seconds=1.0,
                                                          poll_interval=0.02))

    async def until_done() -> None:
        while True:
            runs = await store.list_runs(limit=10)
            if runs and all(r.status in TERMINAL for r in runs):
                worker.stop()
                return
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(until_done())
    try:
        await worker.run()
    finally:
        watcher.cancel()
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
