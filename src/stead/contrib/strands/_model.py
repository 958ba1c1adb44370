"""The agent's model calls, journaled: an `InvokeModelStage` middleware makes
each call a `run.step` whose record holds the model's answer (the message,
the stop reason, usage and metrics, as Strands' own JSON), so a resumed run
gets it back and the model is not asked again.

A live call's stream events (text deltas, tool-use deltas) go on to the
agent's callback handler and `stream_async` as they arrive; a replayed call
has none to give, only its final message."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from pydantic_core import to_jsonable_python
from strands.middleware import InvokeModelContext, MiddlewareNext, ModelStopReason
from strands.types.events import TypedEvent

from stead.contrib import _conversation as conv
from stead.contrib._scope import json_digest
from stead.contrib.strands import _conversation, _session
from stead.contrib.strands._relay import Finished, Relay


def model_name(model: Any) -> str:
    """What a model call's record is named by: its model id if it has one."""
    try:
        config = model.get_config()
    except Exception:  # a model's config is its own business; its type names it then
        config = None
    named = config.get("model_id") if isinstance(config, dict) else None
    return named if isinstance(named, str) and named else type(model).__name__


def _type_name(value: Any) -> str:
    """An object with no JSON form enters the digest by its type, never by its
    repr: a repr may carry a memory address, different on every replay."""
    return type(value).__qualname__


def dump(event: ModelStopReason) -> dict[str, Any]:
    data: dict[str, Any] = to_jsonable_python(
        {"stop_reason": event.stop_reason, "message": event.message, "usage": event.usage,
         "metrics": event.metrics}, fallback=_type_name)
    return data


def load(data: dict[str, Any]) -> ModelStopReason:
    return ModelStopReason(stop_reason=data["stop_reason"], message=data["message"],
                           usage=data["usage"], metrics=data["metrics"])


async def journaled(context: InvokeModelContext,
                    next_fn: MiddlewareNext[InvokeModelContext, TypedEvent]
                    ) -> AsyncGenerator[TypedEvent, None]:
    session = _session.CURRENT.get()
    if session is None:  # not in a stead run: the agent's own call
        async for event in next_fn(context):
            yield event
        return
    session.check()
    name = model_name(context.model)
    # What the request was, as a digest: a changed prompt, history or toolset
    # under a recorded answer is detected on replay, not silently reused. A
    # message's role and content only: Strands gives each message a random
    # `tracking_id`, new on every replay.
    request = {"model": name, "request": json_digest(to_jsonable_python({
        "messages": [{"role": m.get("role"), "content": m.get("content")}
                     for m in context.messages], "system_prompt": context.system_prompt,
        "tools": sorted(str(spec.get("name")) for spec in context.tool_specs),
        "tool_choice": context.tool_choice,
        "output": None if context.structured_output_model is None
        else context.structured_output_model.__name__,
    }, fallback=_type_name))}
    relay = Relay()

    async def ask(_request: dict[str, Any]) -> dict[str, Any]:
        final: ModelStopReason | None = None
        with _session.bound(None):
            async for event in next_fn(context):
                if isinstance(event, ModelStopReason):
                    final = event
                else:
                    relay.put(event)
        if final is None:
            raise RuntimeError(f"model {name!r} ended its stream without a stop reason")
        return dump(final)

    def sent() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        params = {"model": name, "tools": list(context.tool_specs),
                  "tool_choice": context.tool_choice,
                  "output": None if context.structured_output_model is None
                  else context.structured_output_model.__name__}
        return (_conversation.messages(context.system_prompt, context.messages),
                conv.jsonable({k: v for k, v in params.items() if v not in (None, [])}))

    said = conv.Said(sent, lambda data: _conversation.answer(data, name))
    scope = session.scope
    with scope.at("m:" + scope.next("model")):
        task = relay.start(session.run.model_step(f"model {name}", ask, request, said=said))
    async for event in _session.guarded(session, relay.events(task)):
        yield load(event.value) if isinstance(event, Finished) else event
