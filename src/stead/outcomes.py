"""What the outside world says about an effect: `Outcome`, and the `Operation`
an effect function and its `check` receive."""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """The answer of an effect's `check`: what the outside knows of the operation."""

    kind: str
    result: Any = None
    message: str = ""

    DONE = "done"
    NOT_FOUND = "not_found"
    PENDING = "pending"
    FAILED = "failed"
    UNKNOWN = "unknown"

    @classmethod
    def done(cls, result: Any = None) -> Outcome:
        """It happened, with this result."""
        return cls(cls.DONE, result)

    @classmethod
    def not_found(cls) -> Outcome:
        """It provably did not happen: safe to send."""
        return cls(cls.NOT_FOUND)

    @classmethod
    def pending(cls, message: str = "") -> Outcome:
        """Accepted and still running outside: ask again later."""
        return cls(cls.PENDING, message=message)

    @classmethod
    def failed(cls, message: str) -> Outcome:
        """It happened and the outside said no (a known failure)."""
        return cls(cls.FAILED, message=message)

    @classmethod
    def unknown(cls, message: str = "") -> Outcome:
        """Nobody can tell: the run stops for a human to reconcile."""
        return cls(cls.UNKNOWN, message=message)


class Operation:
    """Handed to an effect function (and to its `check`).

    `key` identifies the operation (pass it as the idempotency key); it is the
    same for every attempt and every takeover. `fencing_token` is the lease
    epoch: hand it to systems that can reject writes from a stale worker.
    """

    def __init__(
        self,
        *,
        run_id: str,
        name: str,
        key: str,
        attempt: int,
        fencing_token: int,
        external_id: str | None,
        on_accepted: Callable[[str], Awaitable[None]] | None,
    ) -> None:
        self.run_id = run_id
        self.name = name
        self.key = key
        self.attempt = attempt
        self.fencing_token = fencing_token
        self.external_id = external_id
        self._on_accepted = on_accepted

    async def accepted(self, external_id: str) -> None:
        """Journal, now, that the outside accepted the work under `external_id`
        (CI job 471 exists). From then on a takeover asks `check` about it and
        never submits again."""
        if not isinstance(external_id, str) or not external_id:
            raise ValueError("external_id must be a non-empty string")
        if self._on_accepted is None:
            raise RuntimeError("accepted() can only be called while the effect is sent")
        await self._on_accepted(external_id)
        self.external_id = external_id

    def __repr__(self) -> str:
        return (f"Operation(name={self.name!r}, key={self.key!r}, attempt={self.attempt}, "
                f"fencing_token={self.fencing_token}, external_id={self.external_id!r})")


# The name of the effect whose function runs in this context (None elsewhere):
# only there may a wait token's value be revealed, to be sent.
_SENDING: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "stead_sending", default=None)


async def sending(name: str, call: Awaitable[T]) -> T:
    """Await `call`, an effect function, marked as the sending of effect `name`."""
    mark = _SENDING.set(name)
    try:
        return await call
    finally:
        _SENDING.reset(mark)


def sending_effect() -> str | None:
    """The effect whose function is running here, if any."""
    return _SENDING.get()
