"""pydantic-ai, durable: give the agent the `SteadDurability` capability and
run it with `await run(run, agent, prompt)` in a stead workflow. Built on
pydantic-ai's public durable-execution API (`pydantic_ai.durable_exec`):

- every model request, tool call, toolset discovery and event-handler call is
  a `run.step` holding its result in pydantic-ai's JSON codec; a resumed run
  gets them back and asks and runs nothing again; tool calls are addressed by
  their tool-call id, so parallel calls replay in any order;
- the run's id and start time are recorded, so a replay sees the same ones, and
  pydantic-ai's instrumentation emits no span or token metric for work that
  was only replayed;
- a durable wait for a person (`RequestInput`, `wait_for_external_event`) is a
  `run.wait`: the token `ask` hands out is the wait's, and the run holds no
  worker until `stead approve RUN --wait WAIT --payload JSON` (or
  `Client.deliver`) answers it.

Needs `pip install -e '.[pydantic-ai]'`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.capabilities.abstract import WrapRunHandler
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationBackend,
    RoleBasedOperationConfig,
    conversation_id_from_run_id,
    external_event_scope,
    replay_scope,
)
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, RunContext

import stead
from stead.contrib._scope import Scope
from stead.contrib.pydantic_ai import _binding
from stead.contrib.pydantic_ai._backend import Backend
from stead.contrib.pydantic_ai._waiter import Waiter


class SteadDurability(BaseDurabilityCapability[AgentDepsT]):
    """The capability that makes an agent durable in a stead run. Outside one
    (an agent run not started by `stead.contrib.pydantic_ai.run`) it does
    nothing: the run is an ordinary one."""

    engine_spec = DurabilityEngineSpec(
        engine_name="stead",
        durable_unit_noun="step",
        durable_container_noun="run",
        codec=JSON_CODEC,
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        # Steps run in the worker's own process: an MCP session is held for the run.
        toolset_lifecycles={"function": "enter-always", "mcp": "enter-in-durable-unit",
                            "dynamic": "enter-never"},
        journal_discovery=True,
        sequential_tools_in_durable_context=False,
        tool_config_key=None,
    )

    def __init__(
        self, *, models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(models=models, event_stream_handler=event_stream_handler, name=name)

    @property
    def in_durable_context(self) -> bool:
        return _binding.CURRENT.get() is not None

    def get_durable_operation_backend(self) -> DurableOperationBackend[Any]:
        return Backend(agent_name=self.name, default_model_id=self.default_model_id,
                       config=RoleBasedOperationConfig(model=None, event=None,
                                                       capability=None, tool=None))

    def get_default_run_id(self) -> str | None:
        binding = _binding.CURRENT.get()
        if binding is None:
            return None
        return f"{binding.run.id}:{binding.scope.next('agent-run')}"

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    async def get_run_start_time(self, run_id: str) -> dt.datetime | None:
        binding = _binding.CURRENT.get()
        if binding is None:
            return None
        with binding.scope.at("s:" + binding.scope.next("start")):
            return binding.run.now()

    async def wrap_run(self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler
                       ) -> AgentRunResult[Any]:
        binding = _binding.CURRENT.get()
        if binding is None:
            return await super().wrap_run(ctx, handler=handler)
        with external_event_scope(Waiter(binding)):
            return await super().wrap_run(ctx, handler=handler)


async def run(run: stead.Run, agent: Agent[AgentDepsT, Any], *args: Any,
              **kwargs: Any) -> AgentRunResult[Any]:
    """`agent.run(*args, **kwargs)`, journaled in the workflow's `run` (the
    agent has the `SteadDurability` capability)."""
    if SteadDurability.from_agent(agent) is None:
        raise TypeError(f"agent {agent.name!r} has no SteadDurability capability: create it "
                        "with capabilities=[SteadDurability()]")
    scope = Scope()
    with _binding.bound(_binding.Binding(run, scope)), scope.sdk(), replay_scope():
        return await agent.run(*args, **kwargs)


__all__ = ["SteadDurability", "run"]
