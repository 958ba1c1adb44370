"""A stead app whose workflows run Google ADK agents, offline: the model is a
`google.adk.models.BaseLlm` subclass answering from the request it is sent
(and, streamed, giving its text in two partial chunks before the whole). What
the outside world sees is a file in $SDK_DIR, as for
tests/workers/agents_app.py: model.log, tools.log, ledger.log and the request
handed to a person (approval.json)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents._streaming_mode import StreamingMode
from google.adk.agents.run_config import RunConfig
from google.adk.models import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

import stead
from stead.contrib import google_adk as durable
from stead.testing import kill_process
from tests.workers.agents_app import folder, log

app = stead.App("adk-tests")
Script = Callable[[dict[str, Any]], list[types.Part]]


def responses(request: LlmRequest) -> dict[str, Any]:
    """The tool responses so far, by function-call id (by the tool's name where
    ADK left out an id of its own making)."""
    return {p.function_response.id or p.function_response.name: p.function_response.response
            for c in request.contents for p in c.parts or [] if p.function_response}


def call(name: str, call_id: str | None, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, id=call_id, args=args))


class ScriptedLlm(BaseLlm):
    """Answers each request with the parts its script gives."""

    model: str = "scripted"
    script: Any = None

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        parts = self.script(responses(llm_request))
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=20, candidates_token_count=5, total_token_count=25)
        text = "".join(p.text or "" for p in parts)
        if stream and text:
            half = len(text) // 2
            for piece in (text[:half], text[half:]):
                yield LlmResponse(content=types.Content(role="model",
                                                        parts=[types.Part(text=piece)]),
                                  partial=True)
        yield LlmResponse(content=types.Content(role="model", parts=parts),
                          usage_metadata=usage, turn_complete=True)


def weather_script(done: dict[str, Any]) -> list[types.Part]:
    """First turn: ask for both tools at once; then answer from their results."""
    log("model.log", "asked")
    if not done:
        return [call("temperature", None, city="Paris"), call("forecast", None, city="Paris")]
    return [types.Part(text=" / ".join(sorted(str(r["result"]) for r in done.values())))]


async def temperature(city: str) -> str:
    """The temperature in a city: slow, so it finishes after `forecast`."""
    log("tools.log", "temperature started")
    await asyncio.sleep(0.5)
    log("tools.log", "temperature")
    return f"{city}: 12C"


def forecast(city: str, tool_context: ToolContext) -> str:
    """Tomorrow's sky in a city."""
    log("tools.log", "forecast")
    tool_context.state["sky"] = "rain"  # an action: replayed with the response
    return f"{city}: rain"


# What the weather agent is told: a test changes it under a recorded run.
INSTRUCTIONS = "Answer with the weather."


def weather_agent() -> LlmAgent:
    return LlmAgent(name="weather", model=ScriptedLlm(script=weather_script),
                    instruction=INSTRUCTIONS, tools=[temperature, forecast])


@app.workflow(version=1)
async def weather(run: stead.Run, city: str) -> str:
    result = await durable.run(run, weather_agent(), f"weather in {city}")
    return str(result.text)


@app.workflow(version=1)
async def weather_twice(run: stead.Run, city: str, streamed: bool = False) -> dict[str, Any]:
    """The agent, then a wait: the wake-up replays the agent from the journal."""
    deltas: list[str] = []
    config = RunConfig(streaming_mode=StreamingMode.SSE) if streamed else None
    result = await durable.run(run, weather_agent(), f"weather in {city}", run_config=config,
                               on_text=deltas.append)
    log("deltas.log", json.dumps(deltas))
    await (await run.wait("done", token=False))
    sky = [e.actions.state_delta.get("sky") for e in result.events
           if e.actions and e.actions.state_delta]
    tokens = sum(e.usage_metadata.total_token_count or 0 for e in result.events
                 if e.usage_metadata is not None)
    return {"answer": result.text, "sky": sky, "tokens": tokens}


# -- a refund that needs a person's approval, sent as an effect ---------------
def refund_script(done: dict[str, Any]) -> list[types.Part]:
    log("model.log", "asked")
    if not done:
        return [call("refund", "call_refund", order_id="123", amount=4200)]
    answer = done["call_refund"]
    return [types.Part(text=f"done: {answer.get('result', answer.get('error'))}")]


def refund(order_id: str, amount: int) -> str:
    """Refund an order (the amount in cents)."""
    log("ledger.log", f"{order_id} {amount} {durable.operation().key}")
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


@app.workflow(version=1)
async def refund_order(run: stead.Run, order_id: str, notify: bool = True,
                       idempotent: bool = True) -> str:
    agent = LlmAgent(name="refunds", model=ScriptedLlm(script=refund_script),
                     instruction="Refund when asked.",
                     tools=[FunctionTool(refund, require_confirmation=True)])
    result = await durable.run(run, agent, f"refund order {order_id}",
                               effects={"refund": durable.Effect(idempotent=idempotent)},
                               on_approval=ask_for_approval if notify else None)
    return str(result.text)


# -- an effect whose answer is lost, found again by its check ------------------
payments: dict[str, str] = {}  # the payment service: refunds by idempotency key


def lossy_refund(order_id: str, amount: int) -> str:
    """Refund an order; the service takes it and loses the answer."""
    payments.setdefault(durable.operation().key, f"rf_{order_id}")
    log("ledger.log", f"{order_id} {amount}")
    raise stead.OutcomeUncertain("the connection dropped after the refund was taken")


def find_refund(op: stead.Operation) -> stead.Outcome:
    if op.key in payments:
        return stead.Outcome.done(f"refunded as {payments[op.key]}")
    return stead.Outcome.not_found()


def lossy_script(done: dict[str, Any]) -> list[types.Part]:
    log("model.log", "asked")
    if not done:
        return [call("lossy_refund", "call_refund", order_id="123", amount=4200)]
    return [types.Part(text=f"done: {done['call_refund']['result']}")]


@app.workflow(version=1)
async def checked_refund(run: stead.Run) -> str:
    agent = LlmAgent(name="refunds", model=ScriptedLlm(script=lossy_script),
                     tools=[lossy_refund])
    result = await durable.run(run, agent, "refund order 123",
                               effects={"lossy_refund": durable.Effect(check=find_refund)})
    return str(result.text)


@app.workflow(version=1)
async def refund_named(run: stead.Run, order_id: str) -> str:
    """The refund as a plain tool, named in `approvals=` instead."""
    agent = LlmAgent(name="refunds", model=ScriptedLlm(script=refund_script), tools=[refund])
    result = await durable.run(run, agent, f"refund order {order_id}",
                               effects={"refund": durable.Effect(idempotent=True)},
                               approvals=["refund"])
    return str(result.text)
