"""A stead app whose workflows run pydantic-ai agents, offline: the model is
pydantic-ai's `FunctionModel`, answering from the messages it is sent. What the
outside world sees is a file in $SDK_DIR, as for tests/workers/agents_app.py:
model.log, tools.log, ledger.log and the request handed to a person
(approval.json)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import RequestInput
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests

import stead
from stead.contrib.pydantic_ai import SteadDurability
from stead.contrib.pydantic_ai import run as run_agent
from tests.workers.agents_app import folder, log

app = stead.App("pydantic-ai-tests")


def _returns(messages: list[ModelMessage]) -> list[str]:
    return [str(part.content) for m in messages if isinstance(m, ModelRequest)
            for part in m.parts if isinstance(part, ToolReturnPart)]


def weather_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """First turn: ask for both tools at once; then answer from their results."""
    log("model.log", "asked")
    returns = _returns(messages)
    if not returns:
        return ModelResponse(parts=[
            ToolCallPart("temperature", {"city": "Paris"}, tool_call_id="call_temp"),
            ToolCallPart("forecast", {"city": "Paris"}, tool_call_id="call_sky"),
        ])
    return ModelResponse(parts=[TextPart(" / ".join(sorted(returns)))])


weather_agent = Agent(FunctionModel(weather_model), name="weather",
                      capabilities=[SteadDurability()])


@weather_agent.tool_plain
async def temperature(city: str) -> str:
    """The temperature in a city: slow, so it finishes after `forecast`."""
    log("tools.log", "temperature started")
    await asyncio.sleep(0.5)
    log("tools.log", "temperature")
    return f"{city}: 12C"


@weather_agent.tool_plain
def forecast(city: str) -> str:
    """Tomorrow's sky in a city."""
    log("tools.log", "forecast")
    return f"{city}: rain"


@app.workflow(version=1)
async def weather(run: stead.Run, city: str) -> str:
    result = await run_agent(run, weather_agent, f"weather in {city}")
    return result.output


@app.workflow(version=1)
async def weather_twice(run: stead.Run, city: str) -> dict[str, Any]:
    """The agent, then a wait: the wake-up replays the agent from the journal."""
    result = await run_agent(run, weather_agent, f"weather in {city}")
    await (await run.wait("done", token=False))
    return {"answer": result.output, "run_id": result.run_id,
            "tokens": result.usage.total_tokens}


# -- a refund that needs a person's approval ----------------------------------
def refund_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    log("model.log", "asked")
    returns = _returns(messages)
    if not returns:
        return ModelResponse(parts=[ToolCallPart(
            "refund", {"order_id": "123", "amount": 4200}, tool_call_id="call_refund")])
    return ModelResponse(parts=[TextPart(f"done: {returns[0]}")])


def ask_person(ctx: RunContext[None], requests: DeferredToolRequests, token: str) -> None:
    """What would send a link to a person: here, a file the test reads."""
    (folder() / "approval.json").write_text(json.dumps({
        "token": token, "calls": [c.tool_call_id for c in requests.approvals]}))


refund_agent = Agent(FunctionModel(refund_model), name="refunds",
                     capabilities=[SteadDurability(), RequestInput(ask_person, name="approve")])


@refund_agent.tool_plain(requires_approval=True)
def refund(order_id: str, amount: int) -> str:
    """Refund an order (the amount in cents)."""
    log("ledger.log", f"{order_id} {amount}")
    return f"refunded {amount} on order {order_id}"


@app.workflow(version=1)
async def refund_order(run: stead.Run, order_id: str) -> str:
    result = await run_agent(run, refund_agent, f"refund order {order_id}")
    return str(result.output)
