"""pydantic-ai's durable external-event wait (`wait_for_external_event`, and
`RequestInput` built on it) as a stead wait: the token pydantic-ai hands to
`ask` is the wait's token, `ask` runs once as an idempotent effect (its answer
journaled), and the run then suspends, holding no worker, until an event is
accepted for the wait (`stead approve RUN --wait WAIT --payload JSON`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import JsonValue
from pydantic_ai.durable_exec import ExternalEventError, ExternalEventWaiter

import stead
from stead.contrib.pydantic_ai._binding import Binding


class Waiter(ExternalEventWaiter):
    def __init__(self, binding: Binding) -> None:
        self._binding = binding

    async def wait(
        self, name: str, *, ask: Callable[[str], Awaitable[JsonValue]],
        timeout: dt.timedelta | None,
    ) -> JsonValue:
        run, scope = self._binding.run, self._binding.scope

        async def hand_over(op: stead.Operation, wait: stead.Wait[Any]) -> JsonValue:
            assert wait.token is not None  # the wait is opened with one
            return await ask(wait.token.reveal())

        with scope.at("e:" + scope.next(name)):
            w: stead.Wait[Any] = await run.wait(name, expires_in=timeout)
            answer = await run.effect(f"ask {name}", hand_over, w, idempotent=True)
        if answer is not None:
            return answer  # type: ignore[no-any-return]
        try:
            payload: JsonValue = await w
        except (stead.WaitExpired, stead.WaitRevoked) as exc:
            raise ExternalEventError(str(exc)) from exc
        return payload
