"""LangGraph, durable: `await run(run, graph, input)` in a stead workflow runs a
compiled `StateGraph` (Graph API) or an `@entrypoint` program (Functional API)
with LangGraph's own runtime, and

- every node execution (Graph API) and every call of a task made with
  `stead.contrib.langgraph.task` (Functional API) is a `run.step` holding what
  it returned, addressed by its superstep and path: a resumed run gets it
  back and the node is not run again; a model asked in a node is journaled as
  the node's output (or through stead's adapters);
- a node made with `effect(fn, key=, check=, tool=)` is a write-ahead
  `run.effect`: at most once, with an idempotency key, reconciled after a
  crash, sent only under a grant with `tool=`; its outcome is journaled as
  the node's update itself, the form its `check` answers with
  (`Outcome.done({"receipt": ...})`) and a person reconciling it gives;
- `interrupt()` is a durable stead wait of kind `"interrupt"`, bound to the
  node and single-use, asking the node and the interrupt's value (its
  request, shown by `stead waits show` and the dashboard): the run holds no
  worker until it is answered (`stead approve --link -` with the link sent,
  `stead approve RUN --wait WAIT` for one without a token, the dashboard or
  the webhook), and the event's payload is what `interrupt()` returns in the
  node.

No checkpointer is needed: the graph keeps its checkpoints in memory for the
attempt, and the journal is what survives. See docs/architecture.md.

Needs `pip install -e '.[langgraph]'`."""

from __future__ import annotations

import datetime as dt
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.pregel import Pregel
from langgraph.types import Command, Interrupt

import stead
from stead.contrib._scope import Scope
from stead.contrib.langgraph import _interrupts, _session
from stead.contrib.langgraph._nodes import EffectNode, JournaledNode, effect, task
from stead.contrib.langgraph._session import Session

INTERRUPT = _interrupts.KIND


def _durable(graph: Pregel[Any, Any, Any, Any], session: Session) -> Pregel[Any, Any, Any, Any]:
    """A copy of `graph` whose nodes are journaled (a Graph API graph: the
    Functional API's entrypoint is the run's own code, its tasks journal
    themselves), with a checkpointer of its own held in memory."""
    nodes = graph.nodes
    if isinstance(graph, CompiledStateGraph):
        nodes = {name: node.copy({"bound": JournaledNode(node.bound, name, session)})
                 if name != "__start__" else node for name, node in graph.nodes.items()}
    return graph.copy({"nodes": nodes, "checkpointer": InMemorySaver()})


def _pending(state: Any) -> list[tuple[str, Interrupt]]:
    """The interrupts the graph stopped on, in an order that replays identically."""
    tasks = sorted(state.tasks, key=lambda t: (t.name, repr(t.path)))
    return [(t.name, i) for t in tasks for i in t.interrupts]


async def run(
    run: stead.Run, graph: Pregel[Any, Any, Any, Any], input: Any, *,
    config: RunnableConfig | None = None,
    on_interrupt: _interrupts.Ask | None = None,
    interrupt_expires_in: dt.timedelta | float | None = None,
    **options: Any,
) -> Any:
    """Run `graph` on `input` (as `graph.ainvoke`, with `options` such as
    `context=`), journaled in the workflow's `run`; returns the graph's output.

    Each interrupt opens a wait of kind `"interrupt"` bound to `{"node",
    "pass", "index", "value_sha256"}`; `on_interrupt(op, wait, request)` is
    then called once as an idempotent effect, with `request` the node and the
    interrupt's value: build the link or hand the token over there
    (`wait.link(url)`, `wait.token.reveal()`); the approver answers with that
    link (`stead approve --link -`). Without it the wait has no token, and
    whoever can reach the database answers (`stead approve RUN --wait WAIT`,
    no token given)."""
    if graph.checkpointer not in (None, False):
        raise TypeError("stead.contrib.langgraph.run keeps the graph's progress in the run's "
                        "journal: compile the graph without a checkpointer")
    session = Session(run, Scope())
    durable = _durable(graph, session)
    configurable = {**((config or {}).get("configurable") or {}), "thread_id": run.id}
    cfg: RunnableConfig = {**(config or {}), "configurable": configurable}
    value: Any = input
    with _session.bound(session):
        while True:
            with session.scope.sdk():
                output = await durable.ainvoke(value, cfg, **options)
                state = await durable.aget_state(cfg)
            pending = _pending(state)
            if not pending:
                return output
            answers = await _interrupts.answer(session, pending, on_interrupt,
                                               interrupt_expires_in)
            session.passes += 1
            value = Command(resume=answers)


__all__ = ["INTERRUPT", "EffectNode", "effect", "run", "task"]
