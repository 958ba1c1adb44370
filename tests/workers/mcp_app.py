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
from agents import Agent, ModelResponse, Usage
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from mcp import types
from mcp.client.stdio import stdio_client

import stead
from stead.contrib import mcp as smcp
from stead.contrib import openai_agents
from stead.contrib.mcp import agents_sdk
from tests.workers.agents_app import lines, log

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
        assert {t.name for t in listed.tools} == {"forecast", "refund", "refund_and_hang"}
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


def _refunds_made(key: str) -> list[str]:
    return [line for line in lines("mcp.log") if line.endswith(key)]


@app.workflow(version=1)
async def refund_checked(run: stead.Run, order_id: str, answer: str) -> dict[str, Any]:
    """The refund's answer is lost (the server hangs past the timeout), so its
    check is asked; it `answer`s with the tool's result (`"tool_result"`) or,
    wrongly, with the JSON the tool's service keeps (`"own_json"`)."""
    def find(op: stead.Operation) -> stead.Outcome:
        if not _refunds_made(op.key):
            return stead.Outcome.not_found()
        if answer == "own_json":
            return stead.Outcome.done({"refunded": 4200, "order_id": order_id})
        return stead.Outcome.done(types.CallToolResult(content=[types.TextContent(
            type="text", text=f"refunded 4200 on order {order_id}")]))

    async with session() as s:
        tools = smcp.journaled(run, s, server="tests", effects={"refund_and_hang": smcp.Effect(
            key_argument="idempotency_key", timeout=0.5, check=find)})
        result = await tools.call_tool("refund_and_hang", {"order_id": order_id,
                                                           "amount": 4200})
    return {"text": _text(result), "error": result.is_error}


def agent_answer(call: ModelCall) -> ModelResponse:
    """First turn: call the MCP forecast; then answer from its output."""
    log("model.log", "asked")
    items = call.input if isinstance(call.input, list) else []
    done = [str(i["output"]) for i in items
            if isinstance(i, dict) and i.get("type") == "function_call_output"]
    usage = Usage(requests=1, input_tokens=20, output_tokens=5, total_tokens=25)
    if done:
        return ModelResponse(output=[assistant_message(f"tomorrow: {done[0]}")], usage=usage,
                             response_id="resp_2")
    return ModelResponse(output=[function_call("forecast", {"city": "Paris"},
                                               call_id="call_sky")],
                         usage=usage, response_id="resp_1")


@app.workflow(version=1)
async def weather_agent(run: stead.Run, city: str) -> str:
    """The OpenAI Agents SDK path: the server's tools as the agent's function tools."""
    async with session() as s:
        tools = smcp.journaled(run, s, server="tests")
        agent = Agent(name="weather", instructions="Answer with the weather.",
                      model=ScriptedModel([ModelStep.respond(agent_answer)] * 9),
                      tools=await agents_sdk.function_tools(tools, names=["forecast"]))
        result = await openai_agents.run(run, agent, city)
    return str(result.final_output)


@app.workflow(version=1)
async def every_tool_to_an_agent(run: stead.Run) -> int:
    """The refund is destructive: handed to an agent as a step, it is refused."""
    async with session() as s:
        return len(await agents_sdk.function_tools(smcp.journaled(run, s, server="tests")))
