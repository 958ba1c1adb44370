"""Strands' interrupts answered through stead waits.

An agent that stops on interrupts (a hook's `event.interrupt`, a tool's
`tool_context.interrupt`, a tool in `approvals=`) opens a wait of kind
`"interrupt"` for each, bound to the interrupt's id (Strands derives it from
the tool-use id, itself journaled), its name, the pass and the digest of its
reason: an answer carrying other values is rejected, and a wait takes one
answer, once. The name and reason are the wait's request, what the person
deciding is shown. The run then holds no worker until it is answered (`stead
approve RUN --wait WAIT`, the dashboard or the webhook); the event's payload
is the interrupt's response."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from pydantic_core import to_jsonable_python
from strands.interrupt import Interrupt

import stead
from stead.contrib._scope import json_digest
from stead.contrib.strands._session import Session
from stead.contrib.strands._tools import APPROVAL

KIND = "interrupt"
Ask = Callable[..., Any]


def _plain(value: Any) -> Any:
    return to_jsonable_python(value, fallback=lambda v: type(v).__qualname__)


async def answer(session: Session, pending: Sequence[Interrupt], ask: Ask | None,
                 expires_in: dt.timedelta | float | None) -> list[dict[str, Any]]:
    """Open a wait for each pending interrupt (and hand each to `ask`, an
    idempotent effect), then wait for every answer: the interrupt responses
    the agent is resumed with. An approval that expired or was revoked is a
    refusal; another interrupt's raises its error."""
    run, scope = session.run, session.scope
    opened: list[stead.Wait[Any]] = []
    for index, interrupt in enumerate(pending):
        request = {"name": interrupt.name, "reason": _plain(interrupt.reason)}
        bind = {"interrupt_id": interrupt.id, "name": interrupt.name, "pass": session.passes,
                "reason_sha256": json_digest(request["reason"])}
        with scope.at(f"i:{session.passes}:{index}"):
            w: stead.Wait[Any] = await run.wait(KIND, bind=bind, expires_in=expires_in,
                                                token=ask is not None, request=request)
            if ask is not None:
                await run.effect(f"ask {interrupt.name}", ask, w, request, idempotent=True)
        opened.append(w)
    responses: list[dict[str, Any]] = []
    for interrupt, w in zip(pending, opened, strict=True):
        try:
            payload = await w
        except (stead.WaitExpired, stead.WaitRevoked) as exc:
            if interrupt.name != APPROVAL:
                raise
            payload = {"approved": False, "reason": f"no decision on this call arrived: {exc}"}
        responses.append({"interruptResponse": {"interruptId": interrupt.id,
                                                "response": payload}})
    return responses
