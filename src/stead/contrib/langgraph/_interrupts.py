"""LangGraph's `interrupt()` answered through stead waits.

Each interrupt the graph stopped on opens a wait of kind `"interrupt"`, bound
to the node, the pass of the graph, the interrupt's place among the pending
ones and the digest of its value: an answer carrying other values is
rejected, and a wait takes one answer, once. The node and the value are the
wait's request: what the person deciding is shown. The run then suspends and holds
no worker until it is answered (`stead approve RUN --wait WAIT --payload
JSON`, the dashboard or the webhook); the event's payload is the value
`interrupt()` returns in the node."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from langgraph.types import Interrupt

import stead
from stead.contrib._scope import json_digest
from stead.contrib.langgraph import _values
from stead.contrib.langgraph._session import Session

KIND = "interrupt"
Ask = Callable[..., Any]


async def answer(session: Session, pending: Sequence[tuple[str, Interrupt]], ask: Ask | None,
                 expires_in: dt.timedelta | float | None) -> dict[str, Any]:
    """Open a wait for each pending interrupt (and hand each to `ask`, an
    idempotent effect), then wait for every answer: LangGraph's resume map,
    by interrupt id. A wait that expired or was revoked raises its error."""
    run, scope = session.run, session.scope
    opened: list[stead.Wait[Any]] = []
    for index, (node, item) in enumerate(pending):
        value = _values.plain(item.value)
        bind = {"node": node, "pass": session.passes, "index": index,
                "value_sha256": json_digest(value)}
        with scope.at(f"i:{session.passes}:{index}"):
            w: stead.Wait[Any] = await run.wait(KIND, bind=bind, expires_in=expires_in,
                                                token=ask is not None,
                                                request={"node": node, "value": value})
            if ask is not None:
                await run.effect(f"ask {node}", ask, w, {"node": node, "value": value},
                                 idempotent=True)
        opened.append(w)
    answers: dict[str, Any] = {}
    for (_node, item), w in zip(pending, opened, strict=True):
        answers[item.id] = await w
    return answers
