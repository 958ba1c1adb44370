"""How an integration sends a call declared side-effecting: the options of
`run.effect`, kept with the node or tool they were declared on.

The integration journals the call's outcome in a form of its own (a node's
update, a tool's result as the server's JSON); a `check` answers in the form
its author knows (what the node or tool returns). `outcome` turns a check's
`Outcome.done(result)` into the journaled form before anything is recorded,
and refuses (`InvalidCheckResult`, naming the shape it expects) a result that
has no such form: the run then stops for a person, nothing recorded."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import stead
from stead import calls


@dataclasses.dataclass(frozen=True)
class Effect:
    key: str | None = None
    check: Any = None
    idempotent: bool = False
    tool: str | None = None
    reason: str | None = None
    retry: stead.Retry | None = None
    timeout: float | None = None

    async def send(self, run: stead.Run, name: str, fn: Callable[..., Any], *args: Any,
                   outcome: Callable[[Any], Any] | None = None) -> Any:
        """`run.effect(name, fn, *args)` with these options; `outcome` makes a
        check's result what `fn` journals (see the module's docstring)."""
        return await run.effect(name, fn, *args, key=self.key,
                                check=_shaped(self.check, outcome),
                                idempotent=self.idempotent, tool=self.tool, reason=self.reason,
                                retry=self.retry, timeout=self.timeout)


def _shaped(check: Any, outcome: Callable[[Any], Any] | None) -> Any:
    if check is None or outcome is None:
        return check

    async def asked(op: stead.Operation) -> Any:
        answer = await calls.invoke(check, (op,), {})
        if isinstance(answer, stead.Outcome) and answer.kind == stead.Outcome.DONE:
            return stead.Outcome.done(outcome(answer.result))
        return answer

    return asked
