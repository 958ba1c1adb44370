"""Strands Agents, durable: `await run(run, agent, prompt)` in a stead workflow
invokes a Strands `Agent` with its own event loop, and

- every model call is a `run.step` holding the model's answer (its message,
  stop reason, usage and metrics): a resumed run gets it back and the model is
  not asked again; a live call streams its events to the agent's callback
  handler (and `stream`) as they arrive;
- every tool call is a `run.step` addressed by its tool-use id, so parallel
  calls replay whatever order they finished in; a tool named in `effects=` is
  a write-ahead `run.effect` instead (at most once, with an idempotency key
  the tool reads as `operation().key`, reconciled after a crash with its
  `check`);
- a tool named in `approvals=`, and any interrupt the agent raises (a hook's
  `event.interrupt`, a tool's `tool_context.interrupt`), is a stead wait of
  kind `"interrupt"`, bound to the interrupt and single-use: the run holds no
  worker while it waits (`stead approve RUN --wait WAIT`, `stead reject`, the
  dashboard), and the agent is resumed with the decision.

Both go through Strands' public middleware (`InvokeModelStage`,
`ExecuteToolStage`), registered on the agent once; outside a stead run they
pass every call through. See docs/architecture.md.

Needs `pip install -e '.[strands]'`."""

from __future__ import annotations

import datetime as dt
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from strands import Agent
from strands.agent.agent_result import AgentResult
from strands.middleware import ExecuteToolStage, InvokeModelStage

import stead
from stead import errors
from stead.contrib._effect import Effect
from stead.contrib._scope import Scope, each_step_under
from stead.contrib.strands import _interrupts, _model, _session, _tools

INTERRUPT = _interrupts.KIND
APPROVAL = _tools.APPROVAL
_WIRED: weakref.WeakSet[Agent] = weakref.WeakSet()


def _wire(agent: Agent) -> None:
    """Register the journaling middleware on `agent`, once."""
    if agent in _WIRED:
        return
    agent.add_middleware(InvokeModelStage, _model.journaled)
    agent.add_middleware(ExecuteToolStage, _tools.journaled)
    _WIRED.add(agent)


def operation() -> stead.Operation:
    """The effect a tool declared in `effects=` runs in: `operation().key` is
    its idempotency key, the same on every attempt."""
    op = _session.OPERATION.get()
    if op is None:
        raise errors.SteadError(
            "stead.contrib.strands.operation() is asked for inside a tool declared as an effect "
            "(run(run, agent, prompt, effects={'tool': Effect(...)})), while it runs")
    return op


async def stream(
    run: stead.Run, agent: Agent, prompt: Any = None, *,
    effects: Mapping[str, Effect] | None = None, approvals: Iterable[str] = (),
    on_interrupt: _interrupts.Ask | None = None,
    interrupt_expires_in: dt.timedelta | float | None = None,
    **options: Any,
) -> AsyncIterator[dict[str, Any]]:
    """`agent.stream_async(prompt, **options)`, journaled in the workflow's
    `run` (see `run`): Strands' events as they arrive, live model deltas
    included (a replayed call gives its whole message, no deltas), the last
    one `{"result": AgentResult}`. An interrupt is answered inside, through
    stead waits, and the agent resumed."""
    if getattr(agent, "_session_manager", None) is not None:
        raise TypeError("stead.contrib.strands keeps the conversation in the run's journal: an "
                        "agent's session_manager would be written again on replay")
    session = _session.Session(run, Scope(), dict(effects or {}), frozenset(approvals))
    _wire(agent)
    given: Any = prompt
    while True:
        result: AgentResult | None = None
        with _session.bound(session), session.scope.sdk():
            events = agent.stream_async(given, **options)
        try:
            async for event in _bound(session, events):
                if "result" in event:
                    result = event["result"]
                yield event
        except _session.Escape as escaped:
            raise escaped.error from None
        if session.stopped is not None:
            raise session.stopped
        if result is None or result.stop_reason != "interrupt" or not result.interrupts:
            return
        given = await _interrupts.answer(session, list(result.interrupts), on_interrupt,
                                         interrupt_expires_in)
        session.passes += 1


def _bound(session: _session.Session, events: AsyncIterator[Any]
           ) -> AsyncIterator[dict[str, Any]]:
    """`events`, each step of it taken with the session bound and under its
    scope."""
    return each_step_under(events, lambda: _session.bound(session), session.scope.sdk)


async def run(
    run: stead.Run, agent: Agent, prompt: Any = None, *,
    effects: Mapping[str, Effect] | None = None, approvals: Iterable[str] = (),
    on_interrupt: _interrupts.Ask | None = None,
    interrupt_expires_in: dt.timedelta | float | None = None,
    **options: Any,
) -> AgentResult:
    """Invoke `agent` on `prompt` (as `agent.invoke_async`, with `options` such
    as `invocation_state=`), journaled in the workflow's `run`; returns its
    `AgentResult`.

    `effects` declares side-effecting tools by name (`Effect(check=...,
    idempotent=..., tool=...)`, the options of `run.effect`). `approvals`
    names tools a person approves first. Each interrupt opens a wait of kind
    `"interrupt"` bound to `{"interrupt_id", "name", "pass",
    "reason_sha256"}`; `on_interrupt(op, wait, request)` is then called once
    as an idempotent effect, with `request` the interrupt's name and reason:
    build the link or hand the token over there (`wait.link(url)`). Without
    it the wait has no token, and whoever can reach the database answers
    (`stead approve RUN --wait WAIT`). An agent holds its conversation: give
    each run its own (build it in the workflow)."""
    result: AgentResult | None = None
    async for event in stream(run, agent, prompt, effects=effects, approvals=approvals,
                              on_interrupt=on_interrupt,
                              interrupt_expires_in=interrupt_expires_in, **options):
        if "result" in event:
            result = event["result"]
    if result is None:
        raise errors.SteadError(f"Strands agent {agent.name!r} ended without a result")
    return result


__all__ = ["APPROVAL", "INTERRUPT", "Effect", "operation", "run", "stream"]
