"""A CrewAI Flow's methods, journaled, and its human feedback as stead waits.

Each execution of a `@start`, `@listen` or `@router` method is one `run.step`
holding what it returned and the flow's state after it, addressed by the
method's name and how many times it ran before: a resumed flow gets both back
and the method does not run again. What a method does inside (a crew it
kicks off, a model it asks) is covered by that record.

A `@human_feedback(provider=stead.contrib.crewai.human)` method asks a person
through a stead wait of kind `"feedback"`, bound to the method and the digest
of its output, its request the method, the message and the output: the run
holds no worker until it is answered (`stead approve RUN --wait WAIT
--payload '{"feedback": "..."}'`, the dashboard), once."""

from __future__ import annotations

import inspect
import weakref
from typing import Any

import stead
from stead import calls, errors
from stead.contrib._scope import json_digest, safe_key
from stead.contrib.crewai import _session, _values
from stead.contrib.crewai._session import Session

KIND = "feedback"
SCHEMA = {"type": "object", "properties": {"feedback": {"type": "string"}},
          "required": ["feedback"]}


# The flows a kickoff journaled: a flow instance holds the state of one run.
_JOURNALED: weakref.WeakSet[Any] = weakref.WeakSet()


def journal(session: Session, flow: Any) -> None:
    """Journal each of `flow`'s methods (this instance's only)."""
    if flow in _JOURNALED:
        raise errors.SteadError(
            f"this {type(flow).__name__} was kicked off already, and a flow instance holds the "
            "state of one run: kick off a new one per run, kickoff(run, MyFlow())")
    _JOURNALED.add(flow)
    methods = flow._methods
    for name, method in list(methods.items()):
        methods[name] = _journaled(session, flow, str(name), method)


def _journaled(session: Session, flow: Any, name: str, method: Any) -> Any:
    what = f"flow method {name!r}"

    async def journaled(*args: Any, **kwargs: Any) -> Any:
        async def live(_digest: str) -> dict[str, Any]:
            value = await calls.invoke(method, args, kwargs)
            if inspect.isawaitable(value):
                value = await value
            return {"value": _values.plain(value, what), "state": _values.state(flow)}

        scope = session.scope
        with scope.at("f:" + scope.next(name)):
            data = await session.run.step(
                f"flow {name}", live, json_digest(_values.digestible([args, kwargs])))
        _values.restore(flow, data["state"])
        return data["value"]

    journaled.__name__ = getattr(method, "__name__", name)
    return journaled


class Human:
    """A CrewAI `HumanFeedbackProvider` whose feedback is a stead wait."""

    def request_feedback(self, context: Any, flow: Any) -> Any:
        # CrewAI calls this in a thread and awaits a coroutine it returns on
        # the flow's loop, where the wait is opened.
        session = _session.CURRENT.get()
        if session is None:
            raise errors.SteadError(
                "stead.contrib.crewai.human asks a person only in a stead run: kick the flow "
                "off with stead.contrib.crewai.kickoff(run, flow)")
        return _asked(session, context)


async def _asked(session: Session, context: Any) -> str:
    method = str(context.method_name)
    output = _values.plain(context.method_output, f"flow method {method!r}")
    request = {"method": method, "message": context.message, "output": output,
               "emit": context.emit}
    bind = {"method": method, "output_sha256": json_digest(output)}
    scope = session.scope
    with scope.at("h:" + scope.next("h-" + safe_key(method))):
        w: stead.Wait[Any] = await session.run.wait(
            KIND, bind=bind, schema=SCHEMA, request=request,
            token=session.on_approval is not None, expires_in=session.approval_expires_in)
        if session.on_approval is not None:
            await session.run.effect(f"ask feedback {method}", session.on_approval, w,
                                     request, idempotent=True)
    event = await w
    return str(event["feedback"])


human = Human()
