"""LangGraph's side of `bench.conversation`, in bench/.venv-peers: the same
tool-calling agent as a graph of a model node and a tool node over a
`messages` channel, checkpointed by SqliteSaver (`durability="sync"`); the
bytes the thread added."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from bench import common, conversation_shape
from bench.w_langgraph import cfg, saver
from langgraph.graph import END, START, StateGraph


class Agent(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]
    turns: int


def model(state: Agent) -> dict[str, Any]:
    turn = (len(state["messages"]) - 2) // 2
    said = conversation_shape.answer() if turn >= state["turns"] \
        else conversation_shape.call(turn)
    return {"messages": [said]}


def tool(state: Agent) -> dict[str, Any]:
    turn = (len(state["messages"]) - 2) // 2
    return {"messages": [conversation_shape.result(turn)]}


def route(state: Agent) -> str:
    return "tool" if state["messages"][-1].get("tool_calls") else END


def graph() -> Any:
    g = StateGraph(Agent)
    g.add_node("model", model)
    g.add_node("tool", tool)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route)
    g.add_edge("tool", "model")
    return g


def main(job: dict[str, Any]) -> dict[str, Any]:
    start = [conversation_shape.SYSTEM, conversation_shape.QUESTION]
    with saver(job["url"]) as s:
        app = graph().compile(checkpointer=s)
        app.invoke({"messages": start, "turns": 0}, cfg("warm-up"), durability="sync")
        before = common.used_bytes(job["url"])
        out = app.invoke({"messages": start, "turns": job["turns"]}, cfg("agent"),
                         durability="sync")
        after = common.used_bytes(job["url"])
    return {"bytes": after - before, "messages": len(out["messages"])}


if __name__ == "__main__":
    common.result(main(common.args()))
