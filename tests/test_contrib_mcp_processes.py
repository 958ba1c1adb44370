"""stead.contrib.mcp against real worker processes and a local stdio MCP
server (tests/workers/mcp_server.py): a worker SIGKILLed between a tool call
and the model's next turn is finished by a fresh worker that does not call
the tool again; a destructive tool is an effect whose key reaches the server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import stead
from tests.test_contrib_processes import Procs
from tests.workers import agents_app
from tests.workers.procs import KILLED

pytestmark = pytest.mark.slow
APP = "tests.workers.mcp_app:app"


@pytest.fixture
def procs(sdk_dir: Path, db_url: str) -> Procs:
    return Procs(sdk_dir, db_url)


def _done(journal: list[stead.Record]) -> list[str]:
    return [r.name for r in journal if r.status == "ok"]


@pytest.mark.parametrize(("workflow", "call"), [
    ("weather", "mcp tests.forecast"),  # a ClientSession in the workflow's code
    ("weather_agent", "forecast"),  # the OpenAI Agents SDK, the tool a function tool
])
async def test_killed_after_the_tool_call_the_tool_is_not_called_again(
    procs: Procs, store: stead.Store, workflow: str, call: str,
) -> None:
    client = stead.Client(store)
    info = await client.start(workflow, "Paris", version=1)
    try:
        first = procs.start(APP, "--crash", f"after:1:{call}")
        assert await procs.exit_code(first) == KILLED, procs.output()
        done = _done(await store.load_journal(info.run_id))
        assert done[-1] == call and "mcp tests.list_tools" in done
        assert agents_app.lines("mcp.log") == ["forecast Paris"]
        assert agents_app.lines("model.log") == ["asked"]

        fresh = procs.start(APP)
        assert await procs.exit_code(fresh) == 0, procs.output()
        assert await client.result(info.run_id) == "tomorrow: Paris: rain"
        assert agents_app.lines("mcp.log") == ["forecast Paris"]  # not called again
        assert agents_app.lines("model.log") == ["asked", "asked"]  # turn 1 not re-asked
        [resume] = await client.resumes(info.run_id)
        assert resume.epoch == 2 and resume.details.classes["reuse"] == len(done)
    finally:
        procs.stop_all()


async def test_a_destructive_tool_is_an_effect_sent_with_its_key(
    procs: Procs, store: stead.Store,
) -> None:
    client = stead.Client(store)
    info = await client.start("refund_order", "9", version=1)
    try:
        worker = procs.start(APP)
        assert await procs.exit_code(worker) == 0, procs.output()
        assert await client.result(info.run_id) == {"text": "refunded 4200 on order 9",
                                                    "error": False}
        [intent] = [r for r in await store.load_journal(info.run_id) if r.status == "intent"]
        assert intent.name == "mcp tests.refund"  # journaled before it was sent
        key = json.loads(intent.payload)["key"]
        assert agents_app.lines("mcp.log") == [f"refund 9 4200 {key}"]
    finally:
        procs.stop_all()

