"""Retry policy for steps: attempts with exponential backoff.

The time of the next attempt is journaled with the failed attempt, so the
backoff survives a restart: a new worker waits only what is left of it.
"""

from __future__ import annotations

import dataclasses

from stead import bounds, errors

MAX_ATTEMPTS = 10_000  # more is a loop, not a retry policy


@dataclasses.dataclass(frozen=True, slots=True)
class Retry:
    attempts: int = 3
    backoff: float = 1.0
    factor: float = 2.0
    max_backoff: float = 300.0
    on: tuple[type[BaseException], ...] = (Exception,)

    def __post_init__(self) -> None:
        bounds.integer(self.attempts, "Retry.attempts", least=1, most=MAX_ATTEMPTS)
        bounds.seconds(self.backoff, "Retry.backoff", zero=True)
        bounds.seconds(self.max_backoff, "Retry.max_backoff", zero=True)
        factor = bounds.amount(self.factor, "Retry.factor")
        if factor < 1:
            raise errors.InvalidValue(
                f"Retry.factor is {factor!r}: give a number >= 1 (1: the same delay each time)")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        try:
            grown = self.backoff * self.factor ** (attempt - 1)
        except OverflowError:  # past any max_backoff
            return float(self.max_backoff)
        return float(min(grown, self.max_backoff))

    def retry_at(self, attempt: int, error: BaseException, now: float) -> float | None:
        """When to try again after `attempt` failed with `error`, or None to give up.
        An HTTP error whose response says `Retry-After` (a 429, a 503) waits at
        least that long, up to `max_backoff`."""
        if attempt >= self.attempts or not isinstance(error, self.on):
            return None
        asked = min(retry_after(error, now) or 0.0, self.max_backoff)
        return now + max(self.delay(attempt), asked)


def retry_after(error: BaseException, now: float) -> float | None:
    """The seconds an HTTP error's response asks to wait from `now`
    (`Retry-After`, in seconds or as a date), if it carries one that says so."""
    get = getattr(getattr(getattr(error, "response", None), "headers", None), "get", None)
    value = get("retry-after") if callable(get) else None
    if not isinstance(value, str):
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    import email.utils  # an HTTP date: rare, and `email` costs a few ms to import

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


NO_RETRY = Retry(attempts=1)
