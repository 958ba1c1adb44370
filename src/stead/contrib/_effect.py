"""How an integration sends a call declared side-effecting: the options of
`run.effect`, kept with the node or tool they were declared on."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import stead


@dataclasses.dataclass(frozen=True)
class Effect:
    key: str | None = None
    check: Any = None
    idempotent: bool = False
    tool: str | None = None
    reason: str | None = None
    retry: stead.Retry | None = None
    timeout: float | None = None

    async def send(self, run: stead.Run, name: str, fn: Callable[..., Any],
                   *args: Any) -> Any:
        """`run.effect(name, fn, *args)` with these options."""
        return await run.effect(name, fn, *args, key=self.key, check=self.check,
                                idempotent=self.idempotent, tool=self.tool, reason=self.reason,
                                retry=self.retry, timeout=self.timeout)
