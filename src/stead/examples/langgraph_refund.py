"""A LangGraph graph in a stead workflow, offline (`stead[langgraph]`).
    stead start stead.examples.langgraph_refund:app refund_order '["123"]'
    stead worker stead.examples.langgraph_refund:app --until-idle  # to the interrupt
    stead approve RUN --wait WAIT --token -  # both in example-services/mailbox.json
    stead worker stead.examples.langgraph_refund:app --until-idle  # refunds, once"""
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import stead
from stead.contrib import langgraph
from stead.examples import services

app = stead.App("langgraph-shop")

class Refund(TypedDict, total=False):
    order_id: str
    receipt: str

def review(state: Refund) -> Command[Any]:  # interrupt() waits for a person, holding no worker
    answer = interrupt({"refund": state["order_id"], "amount": 4200})
    return Command(goto="refund" if answer["approved"] else END)

def refund(op: stead.Operation, state: Refund) -> Refund:  # an effect: op.key is its key
    paid = services.Payments().refund(state["order_id"], 4200, idempotency_key=op.key)
    return {"receipt": paid["refund"]}

def find(op: stead.Operation) -> stead.Outcome:  # after a crash mid-send: did it happen?
    paid = services.Payments().lookup(op.key)  # answers with the node's update, or not found
    return stead.Outcome.done({"receipt": paid["refund"]}) if paid else stead.Outcome.not_found()

def ask(op: stead.Operation, wait: stead.Wait[object], request: dict[str, Any]) -> str:
    assert wait.token is not None  # the token comes out only here, in the effect sending it
    return services.Mailbox().send("support@example.com", "Approve the refund?", {
        "wait_id": wait.wait_id, "token": wait.token.reveal(), **request}, key=op.key)

@app.workflow(version=1)
async def refund_order(run: stead.Run, order_id: str, check: bool = True) -> str:
    node = langgraph.effect(refund, check=find if check else None)  # no check: ask a person
    graph = StateGraph(Refund).add_node("review", review).add_node("refund", node)
    out = await langgraph.run(run, graph.add_edge(START, "review").compile(),
                              {"order_id": order_id}, on_interrupt=ask)
    return f"Done: {out.get('receipt', 'refused')}"
