"""A stead app whose workflows run OpenAI Agents SDK agents, offline: the model
is the SDK's `ScriptedModel`, answering from what it is sent. Everything the
outside world sees is a file in $SDK_DIR: each model request (model.log), each
tool run (tools.log), the refund service's ledger (ledger.log), the approval
request handed to a person (approval.json)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from agents import Agent, ModelResponse, Usage, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

import stead
from stead.contrib import openai_agents
from stead.testing import kill_process

app = stead.App("agents-tests")


def folder() -> Path:
    return Path(os.environ.get("SDK_DIR", "."))


def log(name: str, line: str) -> None:
    """One write(2) on an O_APPEND descriptor: lines from threads never interleave."""
    fd = os.open(folder() / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def lines(name: str) -> list[str]:
    path = folder() / name
    return path.read_text().splitlines() if path.exists() else []


def _outputs(call: ModelCall, *call_ids: str) -> list[str]:
    items = call.input if isinstance(call.input, list) else []
    return [str(i["output"]) for i in items
            if isinstance(i, dict) and i.get("type") == "function_call_output"
            and i.get("call_id") in call_ids]


def _usage() -> Usage:
    return Usage(requests=1, input_tokens=20, output_tokens=5, total_tokens=25)


def answer(call: ModelCall) -> ModelResponse:
    """First turn: ask for both tools at once; then answer from their outputs."""
    log("model.log", "asked")
    outputs = _outputs(call, "call_temp", "call_sky")
    if not outputs:
        city = str(call.input if isinstance(call.input, str) else "Paris")
        return ModelResponse(output=[
            function_call("temperature", {"city": city}, call_id="call_temp"),
            function_call("forecast", {"city": city}, call_id="call_sky"),
        ], usage=_usage(), response_id="resp_1")
    return ModelResponse(output=[assistant_message(" / ".join(outputs))], usage=_usage(),
                         response_id=f"resp_{len(outputs) + 1}")


def model(script: Any = answer) -> ScriptedModel:
    # Traced as a real model is (a generation span per call), to see replays emit none.
    return ScriptedModel([ModelStep.respond(script) for _ in range(20)], emit_traces=True)


@function_tool
async def temperature(city: str) -> str:
    """The temperature in a city: slow, so it finishes after `forecast`."""
    log("tools.log", "temperature started")
    await asyncio.sleep(0.5)
    log("tools.log", "temperature")
    return f"{city}: 12C"


@function_tool
def forecast(city: str) -> str:
    """Tomorrow's sky in a city."""
    log("tools.log", "forecast")
    return f"{city}: rain"


# What the weather agent is told: a test changes it under a recorded run.
INSTRUCTIONS = "Answer with the weather."


def weather_agent() -> Agent[Any]:
    return Agent(name="weather", instructions=INSTRUCTIONS, model=model(),
                 tools=[temperature, forecast])


@app.workflow(version=1)
async def weather(run: stead.Run, city: str) -> str:
    result = await openai_agents.run(run, weather_agent(), city)
    return str(result.final_output)


@app.workflow(version=1)
async def weather_twice(run: stead.Run, city: str) -> dict[str, Any]:
    """The agent, then a wait: the wake-up replays the agent from the journal."""
    result = await openai_agents.run(run, weather_agent(), city)
    w = await run.wait("done", token=False)
    await w
    return {"answer": result.final_output, "usage": result.context_wrapper.usage.total_tokens,
            "last_response": result.last_response_id}


def triage_answer(call: ModelCall) -> ModelResponse:
    """Hands every question over to the weather agent."""
    log("model.log", "asked")
    return ModelResponse(output=[function_call("transfer_to_weather", {},
                                               call_id="call_handoff")],
                         usage=_usage(), response_id="resp_0")


@app.workflow(version=1)
async def triage(run: stead.Run, city: str) -> dict[str, Any]:
    """A handoff, then a wait: the wake-up replays both agents."""
    desk = Agent(name="triage", instructions="Hand over.", model=model(triage_answer),
                 handoffs=[weather_agent()])
    result = await openai_agents.run(run, desk, city)
    await (await run.wait("done", token=False))
    return {"answer": result.final_output, "agent": result.last_agent.name}


# -- a refund that needs a person's approval ----------------------------------
def refund_answer(call: ModelCall) -> ModelResponse:
    log("model.log", "asked")
    outputs = _outputs(call, "call_refund")
    if not outputs:
        return ModelResponse(output=[function_call(
            "refund", {"order_id": "123", "amount": 4200}, call_id="call_refund")],
            usage=_usage(), response_id="resp_1")
    return ModelResponse(output=[assistant_message(f"done: {outputs[0]}")], usage=_usage(),
                         response_id="resp_2")


def refund(op: stead.Operation, order_id: str, amount: int) -> str:
    """Refund an order (the amount in cents)."""
    log("ledger.log", f"{order_id} {amount} {op.key}")
    die = folder() / "die-after-sending"
    if die.exists():  # the worker dies once the refund went out, before its outcome is journaled
        die.unlink()
        kill_process()
    return f"refunded {amount} on order {order_id}"


def ask_for_approval(op: stead.Operation, wait: stead.Wait[Any],
                     request: dict[str, Any]) -> None:
    """What would send a link to a person: here, a file the test reads."""
    assert wait.token is not None
    (folder() / "approval.json").write_text(json.dumps(
        {"wait_id": wait.wait_id, "token": wait.token.reveal(), **request}))


REFUND = openai_agents.effect_tool(refund, needs_approval=True, idempotent=True,
                                   failure_error_function=None)  # errors fail the test


@app.workflow(version=1)
async def refund_order(run: stead.Run, order_id: str, expires_in: float | None = None,
                       notify: bool = True) -> str:
    agent = Agent(name="refunds", instructions="Refund when asked.",
                  model=model(refund_answer), tools=[REFUND])
    result = await openai_agents.run(run, agent, f"refund order {order_id}",
                                     on_approval=ask_for_approval if notify else None,
                                     approval_expires_in=expires_in)
    return str(result.final_output)
