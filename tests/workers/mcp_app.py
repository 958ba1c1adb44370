"""A stead app whose workflow asks a model (scripted, offline), calls the tool
it chose on a local stdio MCP server (tests/workers/mcp_server.py), then asks
the model again. What the outside world sees is a file in $SDK_DIR: each
model request (model.log) and each tool call the server served (mcp.log)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp
from mcp.client.stdio import stdio_client

import stead
from stead.contrib import mcp as smcp
from tests.workers.agents_app import log

app = stead.App("mcp-tests")
SERVER = Path(__file__).with_name("mcp_server.py")


@asynccontextmanager
async def session() -> AsyncIterator[mcp.ClientSession]:
    params = mcp.StdioServerParameters(command=sys.executable, args=[str(SERVER)],
                                       env={**os.environ})
    async with stdio_client(params) as (read, write), mcp.ClientSession(read, write) as s:
        await s.initialize()
        yield s


def first_turn(city: str) -> dict[str, Any]:
    log("model.log", "asked")
    return {"tool": "forecast", "arguments": {"city": city}}


def second_turn(tool_output: str) -> str:
    log("model.log", "asked")
    return f"tomorrow: {tool_output}"


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content if getattr(c, "type", None) == "text")


@app.workflow(version=1)
async def weather(run: stead.Run, city: str) -> str:
    choice = await run.step("model turn 1", first_turn, city)
    async with session() as s:
        tools = smcp.journaled(run, s, server="tests")
        listed = await tools.list_tools()
        assert {t.name for t in listed.tools} == {"forecast", "refund"}
        result = await tools.call_tool(choice["tool"], choice["arguments"])
    return str(await run.step("model turn 2", second_turn, _text(result)))


@app.workflow(version=1)
async def refund_order(run: stead.Run, order_id: str) -> dict[str, Any]:
    async with session() as s:
        tools = smcp.journaled(run, s, server="tests", effects={
            "refund": smcp.Effect(key_argument="idempotency_key", idempotent=True)})
        await tools.list_tools()
        result = await tools.call_tool("refund", {"order_id": order_id, "amount": 4200})
    return {"text": _text(result), "error": result.is_error}


@app.workflow(version=1)
async def refund_as_annotated(run: stead.Run, order_id: str, key: str) -> str:
    """No `effects=`: the server's annotations say the refund is destructive."""
    async with session() as s:
        tools = smcp.journaled(run, s, server="tests")
        await tools.list_tools()
        result = await tools.call_tool("refund", {"order_id": order_id, "amount": 4200,
                                                  "idempotency_key": key})
    return _text(result)
