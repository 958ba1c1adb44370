"""The app the payload process tests run in worker processes: a run that
keeps journaling an e-mail address, one step at a time, until it is
stopped."""

from __future__ import annotations

import asyncio

import stead

app = stead.App("payloads")
STEPS = 200


@app.workflow(version=1)
async def chatty(run: stead.Run, email: str) -> int:
    notes = run.stream("notes")
    for i in range(STEPS):
        async def note(i: int = i) -> str:
            await asyncio.sleep(0.05)
            return f"step {i} for {email}"

        said = await run.step(f"note-{i}", note)
        await notes.append({"said": said})
    return STEPS
