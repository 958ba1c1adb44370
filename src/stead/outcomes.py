"""What the outside world says about an effect: `Outcome`, and the `Operation`
an effect function and its `check` receive."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
from collections.abc import Awaitable, Callable, Generator
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


@dataclasses.dataclass(frozen=True, slots=True)
class Compensation:
    """How to undo an effect: `fn(op, *args, **kwargs)`, called with the
    effect's own arguments once a person reconciles it as to be compensated
    (`stead reconcile RUN EFFECT --compensate JSON`). It runs as an effect of
    its own (named `<effect>.compensate`, keyed `<effect key>:compensate`):
    its intent is journaled first, and an unknown outcome is resent if
    `idempotent`, asked of `check`, or stops the run for a person, as for
    any effect."""

    fn: Callable[..., Any]
    check: Callable[[Operation], Any] | None = None
    idempotent: bool = False


class Operation:
    """Handed to an effect function (and to its `check`).

    `key` identifies the operation (pass it as the idempotency key); it is the
    same for every attempt and every takeover. `fencing_token` is the lease
    epoch: hand it to systems that can reject writes from a stale worker.
    `grant` is the `stead.Grant` an effect with a `tool=` is sent under (None
    for an effect that names no tool, and in a `check`).
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
        loop: asyncio.AbstractEventLoop | None = None,
        grant: Any = None,
    ) -> None:
        self.run_id = run_id
        self.grant = grant
        self.name = name
        self.key = key
        self.attempt = attempt
        self.fencing_token = fencing_token
        self.external_id = external_id
        self._on_accepted = on_accepted
        self._loop = loop  # the run's event loop, which journals the acceptance

    def accepted(self, external_id: str) -> Awaitable[None]:
        """Journal that the outside accepted the work under `external_id` (CI
        job 471 exists). From then on a takeover asks `check` about it and
        never submits again.

        An async effect function awaits it: `await op.accepted(job_id)`. A
        sync one (it runs in one of stead's threads) calls it:
        `op.accepted(job_id)` returns once the acceptance is journaled."""
        if not isinstance(external_id, str) or not external_id:
            raise ValueError("external_id must be a non-empty string")
        if self._on_accepted is None:
            raise RuntimeError("accepted() can only be called while the effect is sent")
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None or self._loop is None:
            return self._accept(external_id)
        # A sync effect function, in a thread: journal on the run's loop and wait.
        asyncio.run_coroutine_threadsafe(self._accept(external_id), self._loop).result()
        return _done()

    async def _accept(self, external_id: str) -> None:
        assert self._on_accepted is not None
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


class _Done:
    """An awaitable that is already done: what a sync caller of `accepted` gets
    back (awaiting it is harmless)."""

    def __await__(self) -> Generator[None, None, None]:
        yield from ()


def _done() -> Awaitable[None]:
    return _Done()
