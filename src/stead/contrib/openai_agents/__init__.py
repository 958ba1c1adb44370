"""The OpenAI Agents SDK, durable: `await run(run, agent, input)` in a stead
workflow runs the agent with `agents.Runner.run`, and

- every model answer (`Model.get_response`) is journaled as a step: its output
  items, usage, response and request ids; a resumed run gets it back and the
  model is not asked again;
- every function tool call is a `run.step` addressed by its tool-call id, so
  parallel calls replay whatever order they finished in; a tool made with
  `effect_tool` is a write-ahead `run.effect` instead (at most once, with an
  idempotency key, reconciled after a crash);
- a tool call that `needs_approval` is a `run.wait` bound to the tool, the call
  id and the arguments' digest (`stead approve RUN --wait WAIT`): the run holds
  no worker while it waits, the decision is consumed once, and the approved
  call runs once;
- handoffs replay: the agents they lead to are journaled the same way.

Needs `pip install -e '.[openai-agents]'`."""

from __future__ import annotations

import datetime as dt
from typing import Any

from agents import Agent, RunConfig, Runner, RunResult

import stead
from stead.contrib._scope import Scope
from stead.contrib.openai_agents import _approvals
from stead.contrib.openai_agents._graph import Graph
from stead.contrib.openai_agents._session import Session
from stead.contrib.openai_agents._tools import EffectTool, effect_tool


async def run(
    run: stead.Run, agent: Agent[Any], input: Any, *,
    on_approval: _approvals.Ask | None = None,
    approval_expires_in: dt.timedelta | float | None = None,
    run_config: RunConfig | None = None,
    **options: Any,
) -> RunResult:
    """Run `agent` on `input` (as `Runner.run`, with `options` such as `context=`,
    `max_turns=`, `hooks=`), journaled in the workflow's `run`.

    A tool call that needs approval opens a wait of kind `"approval"`, bound to
    `{"tool", "call_id", "arguments_sha256"}`; `on_approval(op, wait, request)`
    is then called once as an idempotent effect, with `request` the tool, the
    call id and the arguments: build the link or hand the token over there
    (`wait.link(url)`, `wait.token.reveal()`). Without it the wait has no
    token, and whoever can reach the database decides (`stead approve RUN
    --wait WAIT`). An approval runs the call; a rejection (`stead reject`,
    with its reason) tells the model the call was refused."""
    if "session" in options:
        raise TypeError("stead.contrib.openai_agents.run keeps the conversation in the run's "
                        "journal: an SDK session (session=) would be written again on replay")
    session = Session(run, Scope())
    graph = Graph(session)
    start = graph.agent(agent)
    config = graph.config(run_config)
    with session.scope.sdk():
        result = await Runner.run(start, input, run_config=config, **options)
    while result.interruptions:
        state = result.to_state()
        items = list(result.interruptions)
        decisions = await _approvals.decide(session, items, on_approval, approval_expires_in)
        for item, (approved, reason) in zip(items, decisions, strict=True):
            if approved:
                state.approve(item)
            else:
                state.reject(item, rejection_message=reason)
        with session.scope.sdk():
            result = await Runner.run(start, state, run_config=config, **options)
    return result


__all__ = ["EffectTool", "effect_tool", "run"]
