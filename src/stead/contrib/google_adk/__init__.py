"""Google's Agent Development Kit, durable: `await run(run, agent, message)` in
a stead workflow runs an ADK agent (or an `App`) with ADK's own `Runner`, and

- every model call is a `run.step` holding the model's `LlmResponse` as ADK's
  JSON: a resumed run gets it back typed and the model is not asked again;
  with SSE streaming (`run_config=RunConfig(streaming_mode=StreamingMode.SSE)`)
  a live call streams, its text deltas handed to `on_text` as they arrive;
- every tool call is a `run.step` addressed by its function-call id, so
  parallel calls replay whatever order they finished in, with what the tool
  did to its context's actions (state, transfers); a tool named in `effects=`
  is a write-ahead `run.effect` instead (at most once, with an idempotency
  key the tool reads as `operation().key`, reconciled after a crash with its
  `check`);
- a tool named in `approvals=`, or built with ADK's `require_confirmation`, is
  a stead wait of kind `"approval"` bound to the tool, the call id and the
  arguments' digest: the run holds no worker while it waits (`stead approve
  RUN --wait WAIT`, `stead reject`, the dashboard), the decision is taken
  once, and the approved call runs once.

It goes through one ADK plugin (`before_model_callback`,
`before_tool_callback`) added to the runner, and an in-memory session
service: the journal, not a session database, is what survives a crash. See
docs/architecture.md.

Needs `pip install -e '.[google-adk]'`."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from google.adk.agents import BaseAgent
from google.adk.agents._streaming_mode import StreamingMode  # only there, in the pinned release
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App
from google.adk.events import Event
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

import stead
from stead import errors
from stead.contrib._effect import Effect
from stead.contrib._scope import Scope, each_step_under
from stead.contrib.google_adk import _session, _tools
from stead.contrib.google_adk._plugin import SteadPlugin

APPROVAL = _tools.KIND


@dataclasses.dataclass(frozen=True)
class Result:
    """What an agent's run gave: ADK's events, in order, and the text of the
    last final response."""

    events: list[Event]
    text: str | None


def operation() -> stead.Operation:
    """The effect a tool declared in `effects=` runs in: `operation().key` is
    its idempotency key, the same on every attempt."""
    op = _session.OPERATION.get()
    if op is None:
        raise errors.SteadError(
            "stead.contrib.google_adk.operation() is asked for inside a tool declared as an "
            "effect (run(run, agent, message, effects={'tool': Effect(...)})), while it runs")
    return op


def _text(event: Event) -> str | None:
    if not event.is_final_response() or event.content is None:
        return None
    text = "".join(p.text or "" for p in event.content.parts or [] if not p.thought)
    return text or None


def _bound(session: _session.Session, events: AsyncIterator[Event]
           ) -> AsyncIterator[Event]:
    """`events`, each step of it taken with the session bound and under its
    scope."""
    return each_step_under(events, lambda: _session.bound(session), session.scope.sdk)


async def run(
    run: stead.Run, agent: BaseAgent | App, message: str | types.Content, *,
    effects: Mapping[str, Effect] | None = None, approvals: Iterable[str] = (),
    on_approval: _session.Ask | None = None,
    approval_expires_in: dt.timedelta | float | None = None,
    run_config: RunConfig | None = None, on_text: Callable[[str], Any] | None = None,
    user_id: str = "stead", state: Mapping[str, Any] | None = None,
) -> Result:
    """Run `agent` (an ADK agent, or an `App` whose plugins run too) on
    `message`, journaled in the workflow's `run`, in a session of its own
    (`state` its initial state).

    `effects` declares side-effecting tools by name (`Effect(check=...,
    idempotent=..., tool=...)`, the options of `run.effect`). `approvals`
    names tools a person approves first; `on_approval(op, wait, request)` is
    called once per such call as an idempotent effect, with `request` the
    tool, the call id and the arguments: build the link or hand the token over
    there (`wait.link(url)`). Without it the wait has no token, and whoever
    can reach the database decides (`stead approve RUN --wait WAIT`)."""
    root = agent.root_agent if isinstance(agent, App) else agent
    if not isinstance(root, BaseAgent):
        raise TypeError("stead.contrib.google_adk.run runs an ADK agent or an App with a root "
                        "agent")
    plugin = SteadPlugin()
    app = (agent.model_copy(update={"plugins": [*agent.plugins, plugin]})
           if isinstance(agent, App) else App(name=root.name, root_agent=root, plugins=[plugin]))
    config = run_config or RunConfig()
    session = _session.Session(
        run=run, scope=Scope(), root=root, effects=dict(effects or {}),
        approvals=frozenset(approvals), on_approval=on_approval,
        approval_expires_in=approval_expires_in,
        streaming=config.streaming_mode == StreamingMode.SSE, on_text=on_text)
    sessions = InMemorySessionService()
    runner = Runner(app=app, session_service=sessions)
    await sessions.create_session(app_name=app.name, user_id=user_id, session_id=run.id,
                                  state=dict(state or {}))
    content = (message if isinstance(message, types.Content)
               else types.Content(role="user", parts=[types.Part(text=message)]))
    with _session.bound(session), session.scope.sdk():
        events = runner.run_async(user_id=user_id, session_id=run.id, new_message=content,
                                  run_config=config)
    seen: list[Event] = []
    try:
        async for event in _bound(session, events):
            seen.append(event)
    finally:
        await runner.close()
    text = next((t for t in map(_text, reversed(seen)) if t is not None), None)
    return Result(events=seen, text=text)


__all__ = ["APPROVAL", "Effect", "Result", "SteadPlugin", "operation", "run"]
