"""The dashboard's SSE route over a real socket (uvicorn), on both stores: a
browser-like reader gets each entry as it is appended, drops the connection,
and reconnects with Last-Event-ID to get exactly what came after."""

from __future__ import annotations

import asyncio
import re

import httpx

import stead
from stead.web import create_app
from tests.helpers import Gate
from tests.web_app import UI_TOKEN, serving

app = stead.App("sse")


class _Held:
    gate = Gate()  # a fresh one per test (see the test)


@app.workflow(version=1)
async def answer(run: stead.Run) -> None:
    s = run.stream("answer")
    await s.append("first")
    await run.step("gate", _Held.gate.step)
    await s.append("second")
    await s.close()


async def _events(http: httpx.AsyncClient, path: str, headers: dict[str, str],
                  until: int | None) -> list[tuple[str, str]]:
    """(id, event) of the events read, `until` of them or to the end."""
    got: list[tuple[str, str]] = []
    async with http.stream("GET", path, headers=headers) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith(
            "text/event-stream")
        block: dict[str, str] = {}
        async for line in r.aiter_lines():
            if line:
                field, _, value = line.partition(": ")
                block[field] = value
                continue
            if "id" in block:
                got.append((block["id"], block["event"]))
            block = {}
            if until is not None and len(got) == until:
                break  # the connection is dropped mid-stream
    return got


async def test_a_reader_gets_entries_live_and_resumes_from_last_event_id(
    store: stead.Store, db_url: str,
) -> None:
    _Held.gate = gate = Gate()
    client = stead.Client(store, app)
    info = await client.start(answer)
    worker = asyncio.create_task(
        stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01)).run_until_idle())
    path = f"/runs/{info.run_id}/streams/answer"
    with serving(create_app(app, db_url=db_url, token=UI_TOKEN)) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            login = await http.get("/login")
            csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
            assert csrf is not None
            await http.post("/login", data={"csrf": csrf.group(1), "who": "alice",
                                             "token": UI_TOKEN})
            # The first entry arrives while the run is held at its gate: live.
            first = await asyncio.wait_for(_events(http, path, {}, until=1), 30)
            assert first == [("1", "value")]
            await asyncio.wait_for(gate.reached.wait(), 30)  # "second" is not appended yet
            gate.open.set()
            rest = await asyncio.wait_for(_events(http, path, {"Last-Event-ID": "1"}, None), 30)
            assert rest == [("2", "value"), ("3", "closed")]
    await asyncio.wait_for(worker, 30)
