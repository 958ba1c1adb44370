"""The agent graph a run uses: copies of the user's agents (and of every agent
reachable by a handoff) whose models and function tools are journaled. The
user's own agents are left as they are."""

from __future__ import annotations

import dataclasses
from typing import Any

from agents import Agent, FunctionTool, Handoff, Model, RunConfig, RunContextWrapper

from stead.contrib.openai_agents import _model, _tools
from stead.contrib.openai_agents._session import Session


class Graph:
    def __init__(self, session: Session) -> None:
        self._session = session
        # By the original's id; the original is kept so its id stays its own.
        self._copies: dict[int, tuple[Agent[Any], Agent[Any]]] = {}

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        found = self._copies.get(id(agent))
        if found is not None:
            return found[1]
        copy = agent.clone()
        self._copies[id(agent)] = (agent, copy)  # before the handoffs: they may lead back
        if isinstance(agent.model, Model):
            copy.model = _model.journaled(agent.model, self._session)
        copy.tools = [_tools.journaled(t, self._session) if isinstance(t, FunctionTool) else t
                      for t in agent.tools]
        copy.handoffs = [self.agent(h) if isinstance(h, Agent) else self._handoff(h)
                         for h in agent.handoffs]
        return copy

    def _handoff(self, handoff: Handoff[Any, Any]) -> Handoff[Any, Any]:
        invoke = handoff.on_invoke_handoff

        async def on_invoke_handoff(ctx: RunContextWrapper[Any], arguments: str) -> Any:
            target = await invoke(ctx, arguments)
            return self.agent(target) if isinstance(target, Agent) else target

        return dataclasses.replace(handoff, on_invoke_handoff=on_invoke_handoff)

    def config(self, config: RunConfig | None) -> RunConfig:
        """The run's config with its models journaled (a model given here, and
        every model looked up by name), and its traces grouped by the stead run:
        a takeover's trace joins the first one's group."""
        config = config if config is not None else RunConfig()
        model = config.model
        run = self._session.run
        return dataclasses.replace(
            config,
            model=_model.journaled(model, self._session) if isinstance(model, Model) else model,
            model_provider=_model.JournaledProvider(config.model_provider, self._session),
            group_id=config.group_id or run.id,
            trace_metadata={**(config.trace_metadata or {}), "stead.run_id": run.id,
                            "stead.epoch": str(run.epoch)},
        )
