"""A stead app whose workflows run LangGraph graphs, offline. What the outside
world sees is a file in $SDK_DIR, as for tests/workers/agents_app.py: each
node or task run (nodes.log), the refund service's ledger (ledger.log), the
interrupt handed to a person (interrupt.json)."""

from __future__ import annotations

import asyncio
import json
import operator
from typing import Annotated, Any, TypedDict

from langgraph.func import entrypoint
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

import stead
from stead.contrib import langgraph as lg
from stead.testing import kill_process
from tests.workers.agents_app import folder, log

app = stead.App("langgraph-tests")


class Order(TypedDict, total=False):
    order_id: str
    facts: Annotated[list[str], operator.add]
    decision: dict[str, Any]
    receipt: str


def plan(state: Order) -> Order:
    log("nodes.log", "plan")
    return {"facts": [f"order {state['order_id']}"]}


async def lookup(state: Order) -> Order:
    """Slow: it finishes after `history`, which ran beside it."""
    log("nodes.log", "lookup started")
    await asyncio.sleep(0.3)
    log("nodes.log", "lookup")
    return {"facts": ["paid 4200"]}


def history(state: Order) -> Order:
    log("nodes.log", "history")
    return {"facts": ["no refund before"]}


def review(state: Order) -> Order:
    log("nodes.log", "review")
    decision = interrupt({"question": "refund?", "facts": sorted(state["facts"])})
    log("nodes.log", "reviewed")
    return {"decision": decision}


def send_refund(op: stead.Operation, state: Order) -> Order:
    log("ledger.log", f"{state['order_id']} 4200 {op.key}")
    die = folder() / "die-after-sending"
    if die.exists():  # the worker dies once the refund went out, before its outcome is journaled
        die.unlink()
        kill_process()
    return {"receipt": f"refunded 4200 on order {state['order_id']}"}


def graph(*, idempotent: bool = True) -> Any:
    builder = StateGraph(Order)
    builder.add_node("plan", plan)
    builder.add_node("lookup", lookup)
    builder.add_node("history", history)
    builder.add_node("review", review)
    builder.add_node("refund", lg.effect(send_refund, idempotent=idempotent))
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "lookup")
    builder.add_edge("plan", "history")
    builder.add_edge(["lookup", "history"], "review")
    builder.add_conditional_edges("review", lambda s: "refund" if s["decision"].get("approved")
                                  else END)
    builder.add_edge("refund", END)
    return builder.compile()


def hand_over(op: stead.Operation, wait: stead.Wait[Any], request: dict[str, Any]) -> None:
    """What would send a link to a person: here, a file the test reads."""
    assert wait.token is not None
    (folder() / "interrupt.json").write_text(json.dumps(
        {"wait_id": wait.wait_id, "token": wait.token.reveal(), **request}))


@app.workflow(version=1)
async def refund_order(run: stead.Run, order_id: str, notify: bool = True,
                       idempotent: bool = True) -> dict[str, Any]:
    out = await lg.run(run, graph(idempotent=idempotent), {"order_id": order_id},
                       on_interrupt=hand_over if notify else None)
    return {"facts": sorted(out["facts"]), "receipt": out.get("receipt"),
            "decision": out.get("decision")}


# -- the Functional API ---------------------------------------------------------------
@lg.task
async def fetch(city: str) -> str:
    log("nodes.log", f"fetch {city}")
    await asyncio.sleep(0.1)
    return f"{city}: rain"


@lg.task
def summarize(lines: list[str]) -> str:
    log("nodes.log", "summarize")
    return " / ".join(lines)


@entrypoint()
async def forecast(cities: list[str]) -> dict[str, Any]:
    lines = await asyncio.gather(*(fetch(c) for c in cities))
    answer = interrupt({"publish": await summarize(list(lines))})
    return {"summary": await summarize(list(lines)), "answer": answer}


@app.workflow(version=1)
async def forecasts(run: stead.Run, cities: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = await lg.run(run, forecast, cities)
    return out
