"""A stead app whose workflows run Strands agents, offline: the model is a
`strands.models.Model` subclass answering from the messages it is sent, and
streaming its answer as a provider does (text in two deltas). What the outside
world sees is a file in $SDK_DIR, as for tests/workers/agents_app.py:
model.log, tools.log, ledger.log and the request handed to a person
(approval.json)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from strands import Agent, tool
from strands.models import Model
from strands.types.content import Messages

import stead
from stead.contrib import strands as durable
from stead.testing import kill_process
from tests.workers.agents_app import folder, log

app = stead.App("strands-tests")
Script = Callable[[Messages], list[dict[str, Any]]]


class ScriptedModel(Model):
    """Answers each request with the content blocks `script(messages)` gives."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.config: dict[str, Any] = {"model_id": "scripted"}

    def update_config(self, **model_config: Any) -> None:
        self.config.update(model_config)

    def get_config(self) -> dict[str, Any]:
        return self.config

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model answers with text and tool calls")

    async def stream(self, messages: Messages, tool_specs: Any = None,
                     system_prompt: str | None = None, **kwargs: Any
                     ) -> AsyncIterator[Any]:
        blocks = self.script(messages)
        yield {"messageStart": {"role": "assistant"}}
        for block in blocks:
            if "toolUse" in block:
                use = block["toolUse"]
                yield {"contentBlockStart": {"start": {"toolUse": {
                    "toolUseId": use["toolUseId"], "name": use["name"]}}}}
                yield {"contentBlockDelta": {"delta": {"toolUse": {
                    "input": json.dumps(use["input"])}}}}
            else:
                text = block["text"]
                half = len(text) // 2
                for piece in (text[:half], text[half:]):
                    yield {"contentBlockDelta": {"delta": {"text": piece}}}
            yield {"contentBlockStop": {}}
        stop = "tool_use" if any("toolUse" in b for b in blocks) else "end_turn"
        yield {"messageStop": {"stopReason": stop}}
        yield {"metadata": {"usage": {"inputTokens": 20, "outputTokens": 5, "totalTokens": 25},
                            "metrics": {"latencyMs": 1}}}


def results(messages: Messages) -> dict[str, str]:
    """The tool results so far, by tool-use id (their text)."""
    return {block["toolResult"]["toolUseId"]:
            " ".join(c.get("text", "") for c in block["toolResult"]["content"])
            for m in messages for block in m["content"] if "toolResult" in block}


def use(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": call_id, "name": name, "input": arguments}}


def weather_script(messages: Messages) -> list[dict[str, Any]]:
    """First turn: ask for both tools at once; then answer from their results."""
    log("model.log", "asked")
    done = results(messages)
    if not done:
        return [use("temperature", "call_temp", city="Paris"),
                use("forecast", "call_sky", city="Paris")]
    return [{"text": " / ".join(sorted(done.values()))}]


@tool
async def temperature(city: str) -> str:
    """The temperature in a city: slow, so it finishes after `forecast`."""
    log("tools.log", "temperature started")
    await asyncio.sleep(0.5)
    log("tools.log", "temperature")
    return f"{city}: 12C"


@tool
def forecast(city: str) -> str:
    """Tomorrow's sky in a city."""
    log("tools.log", "forecast")
    return f"{city}: rain"


@app.workflow(version=1)
async def weather(run: stead.Run, city: str) -> str:
    agent = Agent(model=ScriptedModel(weather_script), tools=[temperature, forecast],
                  callback_handler=None)
    result = await durable.run(run, agent, f"weather in {city}")
    return str(result).strip()


# -- a refund that needs a person's approval, sent as an effect ---------------
def refund_script(messages: Messages) -> list[dict[str, Any]]:
    log("model.log", "asked")
    done = results(messages)
    if not done:
        return [use("refund", "call_refund", order_id="123", amount=4200)]
    return [{"text": f"done: {done['call_refund']}"}]


@tool
def refund(order_id: str, amount: int) -> str:
    """Refund an order (the amount in cents)."""
    key = durable.operation().key
    log("ledger.log", f"{order_id} {amount} {key}")
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
    agent = Agent(model=ScriptedModel(refund_script), tools=[refund], callback_handler=None)
    result = await durable.run(run, agent, f"refund order {order_id}",
                               effects={"refund": durable.Effect(idempotent=idempotent)},
                               approvals=["refund"],
                               on_interrupt=ask_for_approval if notify else None)
    return str(result).strip()


# What the weather agent is told: a test changes it under a recorded run.
INSTRUCTIONS = "Answer with the weather."


@app.workflow(version=1)
async def weather_twice(run: stead.Run, city: str) -> dict[str, Any]:
    """The agent, then a wait: the wake-up replays the agent from the journal."""
    agent = Agent(model=ScriptedModel(weather_script), tools=[temperature, forecast],
                  system_prompt=INSTRUCTIONS, callback_handler=None)
    result = await durable.run(run, agent, f"weather in {city}")
    await (await run.wait("done", token=False))
    return {"answer": str(result).strip(), "stop": result.stop_reason,
            "tokens": result.metrics.accumulated_usage["totalTokens"]}


@app.workflow(version=1)
async def weather_streamed(run: stead.Run, city: str) -> dict[str, Any]:
    """The agent through `stream`: what a screen would show, then a wait."""
    agent = Agent(model=ScriptedModel(weather_script), tools=[temperature, forecast],
                  callback_handler=None)
    deltas: list[str] = []
    async for event in durable.stream(run, agent, f"weather in {city}"):
        if "data" in event:
            deltas.append(event["data"])
        if "result" in event:
            answer = str(event["result"]).strip()
    log("deltas.log", json.dumps(deltas))
    await (await run.wait("done", token=False))
    return {"answer": answer}


# -- a hook asking a person before a tool runs (Strands' own interrupts) -------
class AskFirst:
    """A Strands hook: every `forecast` call waits for a person's yes."""

    def register_hooks(self, registry: Any, **kwargs: Any) -> None:
        from strands.hooks import BeforeToolCallEvent

        registry.add_callback(BeforeToolCallEvent, self.ask)

    def ask(self, event: Any) -> None:
        if event.tool_use["name"] != "forecast":
            return
        answer = event.interrupt("confirm", reason={"city": event.tool_use["input"]["city"]})
        if answer.get("approved") is not True:
            event.cancel_tool = "the forecast was not confirmed"


@app.workflow(version=1)
async def confirmed_forecast(run: stead.Run, city: str) -> str:
    agent = Agent(model=ScriptedModel(weather_script), tools=[temperature, forecast],
                  hooks=[AskFirst()], callback_handler=None)
    result = await durable.run(run, agent, f"weather in {city}")
    return str(result).strip()


# -- an effect whose answer is lost, found again by its check ------------------
payments: dict[str, str] = {}  # the payment service: refunds by idempotency key


@tool
def lossy_refund(order_id: str, amount: int) -> str:
    """Refund an order; the service takes it and loses the answer."""
    payments.setdefault(durable.operation().key, f"rf_{order_id}")
    log("ledger.log", f"{order_id} {amount}")
    raise stead.OutcomeUncertain("the connection dropped after the refund was taken")


def find_refund(op: stead.Operation) -> stead.Outcome:
    if op.key in payments:
        return stead.Outcome.done(f"refunded as {payments[op.key]}")
    return stead.Outcome.not_found()


def lossy_script(messages: Messages) -> list[dict[str, Any]]:
    log("model.log", "asked")
    done = results(messages)
    if not done:
        return [use("lossy_refund", "call_refund", order_id="123", amount=4200)]
    return [{"text": f"done: {done['call_refund']}"}]


@app.workflow(version=1)
async def checked_refund(run: stead.Run) -> str:
    agent = Agent(model=ScriptedModel(lossy_script), tools=[lossy_refund],
                  callback_handler=None)
    result = await durable.run(run, agent, "refund order 123",
                               effects={"lossy_refund": durable.Effect(check=find_refund)})
    return str(result).strip()


# -- a tool that asks a person itself (`tool_context.interrupt`) ---------------
@tool(context=True)
def choose(city: str, tool_context: Any) -> str:
    """Which forecast to give: a person picks."""
    log("tools.log", "choose started")
    answer = tool_context.interrupt("pick", reason={"city": city})
    log("tools.log", "choose")
    return f"picked {answer['choice']} for {city}"


def choose_script(messages: Messages) -> list[dict[str, Any]]:
    log("model.log", "asked")
    done = results(messages)
    if not done:
        return [use("choose", "call_choose", city="Paris")]
    return [{"text": done["call_choose"]}]


@app.workflow(version=1)
async def chosen(run: stead.Run) -> dict[str, Any]:
    """The agent, then a wait: the wake-up replays the tool's interrupt too."""
    agent = Agent(model=ScriptedModel(choose_script), tools=[choose], callback_handler=None)
    result = await durable.run(run, agent, "weather in Paris")
    await (await run.wait("done", token=False))
    return {"answer": str(result).strip()}
