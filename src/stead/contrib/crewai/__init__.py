"""CrewAI, durable: `await kickoff(run, flow_or_crew, inputs)` in a stead
workflow runs a CrewAI Flow (`kickoff_async`) or a Crew (`akickoff`), and

- each execution of a Flow's method is a `run.step` holding what it returned
  and the flow's state after it: a resumed flow gets both back and the method
  does not run again (`_flows`);
- a `@human_feedback(provider=human)` method asks a person through a stead
  wait of kind `"feedback"`, bound to the method and its output, answered
  once, days later if need be, from `stead approve` or the dashboard;
- a Crew's model calls, sent by CrewAI's LiteLLM path (`LLM(model,
  is_litellm=True)`), are `run.llm` calls through `stead.llm.LiteLLM`: asked
  once, ever, usage and request id journaled, LiteLLM's typed answer handed
  back to CrewAI on replay, streamed where CrewAI streams (`_models`); those
  of CrewAI's native OpenAI and Anthropic clients are `run.llm` calls too,
  journaled at the SDK's HTTP transport, the SDK parsing the recorded answer
  on replay as it did live (`_native`);
- a Crew's tool calls are `run.step`s holding their results; a tool made with
  `effect_tool` is a write-ahead `run.effect` (idempotency key, `check=`),
  and with `approval=True` it first waits for a person's decision, a stead
  wait of kind `"approval"` bound to the tool and its arguments (`_tools`).

Needs `pip install -e '.[crewai]'` (see docs/install.md: CrewAI pins releases
of openai and mcp other extras do not take, so it gets an environment of its own)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

from crewai import Crew
from crewai.flow.flow import Flow

import stead
from stead.contrib._scope import Scope
from stead.contrib.crewai import _flows, _models, _native, _session, _tools
from stead.contrib.crewai._flows import human
from stead.contrib.crewai._tools import EffectTool, effect_tool

FEEDBACK = _flows.KIND
APPROVAL = _tools.KIND


def _without_memory(crew: Crew) -> None:
    """Refuse a crew with memory: what it remembers lives in CrewAI's own
    store, which a crashed attempt wrote to and the journal cannot take
    back, so a replayed turn would be asked with other recalled context
    than it was journaled with (and stop as incompatible)."""
    if crew.memory:
        raise TypeError(
            "a crew with memory (Crew(memory=...)) cannot be journaled by stead: its memory "
            "store keeps what an attempt that crashed wrote, so a resumed run would not ask "
            "its recorded turns again as they were asked. Leave memory off and keep what the "
            "crew must remember in the workflow (run.state) or in a flow's state")


def _journaled_llms(crew: Crew) -> None:
    """Journal the agents' native OpenAI and Anthropic clients (LiteLLM's
    path is journaled by `_models.install`); refuse any other client."""
    for agent in crew.agents:
        llm = agent.llm
        if llm is None or getattr(llm, "is_litellm", False):
            continue
        if _native.provider_of(llm) is None:
            raise TypeError(
                f"agent {agent.role!r} asks {type(llm).__name__}, which stead cannot journal: "
                "give it crewai.LLM(model, is_litellm=True), CrewAI's LiteLLM path, or an "
                "OpenAI or Anthropic model CrewAI calls natively")
        _native.journal(llm)


async def kickoff(
    run: stead.Run, target: Flow[Any] | Crew, inputs: dict[str, Any] | None = None, *,
    on_approval: Callable[..., Any] | None = None,
    approval_expires_in: dt.timedelta | float | None = None,
    on_text: Callable[[str], Any] | None = None,
) -> Any:
    """Run the flow or crew on `inputs`, journaled in the workflow's `run`;
    returns what CrewAI returns (a flow's last method's value as journaled, a
    crew's `CrewOutput`).

    `on_approval(op, wait, request)`, if given, is called once per wait (an
    idempotent effect) with the wait's request: build the link or hand the
    token over there (`wait.link(url)`, `wait.token.reveal()`). Without it the
    wait has no token, and whoever can reach the database decides (`stead
    approve RUN --wait WAIT`).

    A model call CrewAI streams (`LLM(..., stream=True)`) is streamed from the
    provider and journaled whole; `on_text` (a `run.stream(name)`, or any
    callable) gets its text deltas as they come, live only: a replayed
    answer sends none. CrewAI gets the same chunks live and on replay."""
    _models.install()
    session = _session.Session(run, Scope(), asyncio.get_running_loop(), on_approval,
                               approval_expires_in, on_text)
    with _session.bound(session):
        if isinstance(target, Flow):
            _flows.journal(session, target)
            with session.scope.sdk():
                return await target.kickoff_async(inputs=inputs)
        if isinstance(target, Crew):
            _without_memory(target)
            crew = target.copy()  # its tools journaled; the user's crew is left as it is
            _journaled_llms(crew)
            _tools.journal(crew)
            with session.scope.sdk():
                return await crew.akickoff(inputs=inputs)
    raise TypeError(f"kickoff takes a CrewAI Flow or Crew (got {type(target).__name__})")


__all__ = ["APPROVAL", "FEEDBACK", "EffectTool", "effect_tool", "human", "kickoff"]
