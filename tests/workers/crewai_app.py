"""A stead app whose workflows run a CrewAI crew and a CrewAI Flow, offline:
the crew's model is CrewAI's LiteLLM path to a LiteLLM provider of the test's
own (`scripted/clerk`) that answers with LiteLLM's `mock_completion`, turn by
turn, streamed a few words a chunk when the crew's LLM streams. Everything the
outside world sees is a file in $SDK_DIR: each model
request (model.log), each tool run (tools.log), the refund service's ledger
(ledger.log), each flow method run (nodes.log), the approval request handed to
a person (approval.json)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

import litellm
from crewai import LLM, Agent, Crew, Task
from crewai.flow.flow import Flow, listen, start
from crewai.flow.human_feedback import human_feedback
from crewai.tools import BaseTool
from litellm import CustomLLM
from litellm.types.utils import GenericStreamingChunk

import stead
from stead.contrib import crewai as sc
from stead.testing import kill_process

app = stead.App("crewai-tests")


# CrewAI's environment has no OpenAI Agents SDK: tests/workers/agents_app's
# helpers are not imported from there.
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


def turn(messages: list[dict[str, Any]]) -> str:
    """The clerk's next turn: the order, then the refund, then the answer."""
    said = json.dumps(messages)
    if "rf_123" in said:
        return "Thought: The refund went out.\nFinal Answer: Refunded order 123: rf_123."
    if "4200" in said:
        return ('Thought: The order was paid, refund it.\nAction: refund\n'
                'Action Input: {"order_id": "123", "amount": 4200}')
    return ('Thought: Look the order up first.\nAction: lookup_order\n'
            'Action Input: {"order_id": "123"}')


class Clerk(CustomLLM):  # type: ignore[misc]
    """The provider: asks for the order, then the refund, then answers;
    streamed a few words a chunk when asked to stream."""

    def completion(self, model: str, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        log("model.log", "asked")
        return litellm.mock_completion(model="clerk", messages=messages,
                                       mock_response=turn(messages))

    async def acompletion(self, model: str, messages: list[dict[str, Any]], **kwargs: Any
                          ) -> Any:
        return self.completion(model, messages, **kwargs)

    def streaming(self, model: str, messages: list[dict[str, Any]], **kwargs: Any
                  ) -> Iterator[GenericStreamingChunk]:
        log("model.log", "asked (streamed)")
        words = turn(messages).split(" ")
        for i in range(0, len(words), 3):
            if i == 3 and (folder() / "die-mid-stream").exists():
                (folder() / "die-mid-stream").unlink()  # a few chunks arrived: the worker dies
                kill_process()
            text = " ".join(words[i:i + 3]) + (" " if i + 3 < len(words) else "")
            yield {"text": text, "tool_use": None, "is_finished": False, "finish_reason": "",
                   "usage": None, "index": 0}
        yield {"text": "", "tool_use": None, "is_finished": True, "finish_reason": "stop",
               "usage": {"prompt_tokens": 12, "completion_tokens": len(words),
                         "total_tokens": 12 + len(words)}, "index": 0}

    async def astreaming(self, model: str, messages: list[dict[str, Any]], **kwargs: Any
                         ) -> AsyncIterator[GenericStreamingChunk]:
        for chunk in self.streaming(model, messages, **kwargs):
            yield chunk


litellm.custom_provider_map = [{"provider": "scripted", "custom_handler": Clerk()}]


class LookupOrder(BaseTool):
    name: str = "lookup_order"
    description: str = "Look an order up by its id."

    def _run(self, order_id: str) -> str:
        log("tools.log", f"lookup {order_id}")
        die = folder() / "die-in-tool"
        if die.exists():  # the worker dies mid-tool, before the tool's result is journaled
            die.unlink()
            kill_process()
        return json.dumps({"order_id": order_id, "paid": 4200})


def dying_lookup() -> BaseTool:
    """The lookup, whose worker dies in-process (`tests.helpers.Crash`) the
    first time, after the tool ran and before its result is journaled."""
    from tests.helpers import Crash

    died: list[bool] = []

    class Dying(LookupOrder):
        def _run(self, order_id: str) -> str:
            result = super()._run(order_id)
            if not died:
                died.append(True)
                raise Crash()
            return result

    return Dying()


def refund(op: stead.Operation, order_id: str, amount: int) -> str:
    """Refund an order (the amount in cents)."""
    log("ledger.log", f"{order_id} {amount} {op.key}")
    die = folder() / "die-after-sending"
    if die.exists():  # the refund went out; the worker dies before its outcome is journaled
        die.unlink()
        kill_process()
    return f"rf_{order_id}"


def refund_check(op: stead.Operation) -> stead.Outcome:
    """What the payment service knows of the refund with this key."""
    sent = [line for line in lines("ledger.log") if line.endswith(f" {op.key}")]
    return stead.Outcome.done("rf_" + sent[0].split()[0]) if sent else stead.Outcome.not_found()


REFUND = sc.effect_tool(refund, key=lambda a: f"refund-{a['order_id']}", check=refund_check,
                        approval=True)


def ask_for_approval(op: stead.Operation, wait: stead.Wait[Any],
                     request: dict[str, Any]) -> None:
    """What would send a link to a person: here, a file the test reads."""
    assert wait.token is not None
    (folder() / "approval.json").write_text(json.dumps(
        {"wait_id": wait.wait_id, "token": wait.token.reveal(), **request}))


def crew(lookup: BaseTool | None = None, *, stream: bool = False, llm: Any = None) -> Crew:
    """The refund clerk's crew; its model the scripted provider through
    LiteLLM unless `llm` is given."""
    clerk = Agent(role="refund clerk", goal="Refund paid orders when asked.",
                  backstory="You work at the shop's desk.",
                  tools=[lookup or LookupOrder(), REFUND],
                  llm=llm or LLM(model="scripted/clerk", is_litellm=True, stream=stream),
                  verbose=False)
    task = Task(description="Refund order {order_id}.", expected_output="the refund id",
                agent=clerk)
    return Crew(agents=[clerk], tasks=[task], verbose=False)


@app.workflow(version=1)
async def refund_order(run: stead.Run, order_id: str) -> str:
    output = await sc.kickoff(run, crew(), {"order_id": order_id},
                              on_approval=ask_for_approval)
    return str(output.raw)


@app.workflow(version=1)
async def refund_order_streamed(run: stead.Run, order_id: str) -> str:
    """The same crew, its model streamed: the text deltas go to a stead stream."""
    output = await sc.kickoff(run, crew(stream=True), {"order_id": order_id},
                              on_approval=ask_for_approval, on_text=run.stream("clerk"))
    return str(output.raw)


class Review(Flow):  # type: ignore[type-arg]
    @start()
    def plan(self) -> str:
        log("nodes.log", "plan")
        self.state["plan"] = "refund 4200"
        return "refund 4200 on order 123"

    @listen(plan)
    @human_feedback(message="Approve this refund?", provider=sc.human)
    def review(self, plan: str) -> str:
        log("nodes.log", "review")
        return plan

    @listen(review)
    def act(self, reviewed: Any) -> dict[str, Any]:
        log("nodes.log", "act")
        return {"plan": self.state["plan"], "feedback": reviewed.feedback}


@app.workflow(version=1)
async def review(run: stead.Run) -> Any:
    return await sc.kickoff(run, Review())
