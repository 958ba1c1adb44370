"""What the worker decides for a run it hosts (`ExecutionOptions`), and the
shape of a takeover's revalidation (`Judge`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from stead import keys
    from stead.policy import Action


class Standing(Protocol):
    """Whether the worker hosting a run is sure it still holds its leases
    (`stead.worker.standing.Standing`)."""

    def sure(self) -> bool: ...

    async def regained(self) -> None: ...


class Judge(Protocol):
    """A takeover's revalidation (`stead.workflow.revalidation.Revalidation`)."""

    @property
    def pending(self) -> bool: ...

    async def judge(self, action: Action | None) -> bool: ...


@dataclasses.dataclass(frozen=True, slots=True)
class ExecutionOptions:
    """What the worker hosting a run decides for it."""

    # A wait or timer further away than this suspends the run (lease released,
    # no worker held); a nearer one sleeps in the process.
    suspend_after: float = 1.0
    # How often a parked branch wakes to re-check what it waits for.
    recheck_every: float = 5.0
    # Where the keys that sign wait tokens come from (asked when a wait
    # opens); with None, opening a wait with a token fails.
    keyring: Callable[[], Awaitable[keys.Keyring]] | None = None
    # The largest result (of a step, effect or model call) journaled, as JSON.
    max_result_bytes: int = 16 * 1024 * 1024
    # A dry replay (`stead.dryrun`): nothing live starts and nothing is
    # written; the first live call raises `Frontier`.
    dry: bool = False
    # Whether the worker is sure it still holds its leases: a call that
    # reaches outside waits until it is (None: always sure).
    standing: Standing | None = None
