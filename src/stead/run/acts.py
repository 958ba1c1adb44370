"""`Run.effect` and `Run.workspace`: what the run does to the world outside
(an effect sent at most once, knowingly), and the directories its steps
change (saved with each step's result)."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from stead import addresses, bounds
from stead.outcomes import Compensation, Operation, Outcome
from stead.retry import NO_RETRY, Retry
from stead.run.base import Part
from stead.workflow import effects

if TYPE_CHECKING:
    from stead.workflow import workspaces

# The most bytes of files one workspace may hold, unless `max_bytes=` says otherwise.
WORKSPACE_MAX_BYTES = 256 * 1024 * 1024

T = TypeVar("T")
Check = Callable[[Operation], Awaitable[Outcome]] | Callable[[Operation], Outcome]


class Acts(Part):
    """The run's effects and workspaces."""

    @overload
    async def effect(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        key: str | None = None,
        check: Check | None = None,
        idempotent: bool | dt.timedelta = False,
        retry: Retry | None = None,
        timeout: float | None = None,
        poll_every: float = 1.0,
        uncertain: tuple[type[BaseException], ...] = effects.DEFAULT_UNCERTAIN,
        tool: str | None = None,
        reason: str | None = None,
        cost: float | None = None,
        compensate: Callable[..., Any] | Compensation | None = None,
        contract: str | None = None,
        **kwargs: Any,
    ) -> T: ...

    @overload
    async def effect(
        self,
        name: str,
        fn: Callable[..., T],
        *args: Any,
        key: str | None = None,
        check: Check | None = None,
        idempotent: bool | dt.timedelta = False,
        retry: Retry | None = None,
        timeout: float | None = None,
        poll_every: float = 1.0,
        uncertain: tuple[type[BaseException], ...] = effects.DEFAULT_UNCERTAIN,
        tool: str | None = None,
        reason: str | None = None,
        cost: float | None = None,
        compensate: Callable[..., Any] | Compensation | None = None,
        contract: str | None = None,
        **kwargs: Any,
    ) -> T: ...

    async def effect(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        key: str | None = None,
        check: Check | None = None,
        idempotent: bool | dt.timedelta = False,
        retry: Retry | None = None,
        timeout: float | None = None,
        poll_every: float = 1.0,
        uncertain: tuple[type[BaseException], ...] = effects.DEFAULT_UNCERTAIN,
        tool: str | None = None,
        reason: str | None = None,
        cost: float | None = None,
        compensate: Callable[..., Any] | Compensation | None = None,
        contract: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Perform a side effect at most once, knowingly: the intent (with the
        operation `key`) is journaled before `fn(op, *args, **kwargs)` runs, the
        outcome after. After a crash, an effect whose outcome is unknown is
        resent only if `idempotent`, else `check(op)` is asked, else the run
        stops as `outcome_unknown` for a human to reconcile. A `not_found`
        from `check` is acted on only once no earlier holder of the run can
        still be sending (see docs/concepts/effects.md). An exception from
        `fn` is a known failure (retried under `retry`, then `EffectFailed`);
        a timeout or `OutcomeUncertain` is not: the outcome is unknown.

        `idempotent=timedelta(hours=24)` is the receiver's dedup window for
        the key: within it from the first send, an unknown outcome is resent;
        past it, a resend could act twice, so it is not: `check` is asked, or
        the run stops as `outcome_unknown`.

        With `tool=`, the effect is sent only under an unexpired grant of the
        run's intent for that tool whose scope covers its arguments, checked
        in the transaction that commits its intent; `fn` gets it as
        `op.grant`. `reason` is handed to the policy; `cost` counts against
        the budget's `spend`. What is refused pauses the run, nothing sent.
        `contract` is folded into the digest, as for `step`.

        `compensate=fn` (or a `stead.Compensation` with its own `check` and
        `idempotent`) undoes the effect once a person reconciles it as to be
        compensated: it runs as an effect of its own, its outcome followed as
        any effect's, and the workflow then sees `EffectCompensated`."""
        bounds.text(name, "an effect name")
        if cost is not None:
            cost = bounds.amount(cost, "an effect's cost")
        if key is not None and (not isinstance(key, str) or not key):
            raise ValueError("an effect key must be a non-empty string")
        bounds.optional_text(key, "an effect key")
        bounds.optional_text(tool, "an effect's tool")
        if timeout is not None:
            timeout = bounds.seconds(timeout, "an effect's timeout")
        poll_every = bounds.seconds(poll_every, "an effect's poll_every")
        window = None
        if isinstance(idempotent, dt.timedelta):
            window = bounds.seconds(idempotent, "an effect's dedup window (idempotent=timedelta)")
        elif not isinstance(idempotent, bool):
            raise TypeError("idempotent is True, False or the key's dedup window (a timedelta)")
        if compensate is not None and not isinstance(compensate, Compensation):
            if not callable(compensate):
                raise TypeError("compensate is a function or a stead.Compensation")
            compensate = Compensation(compensate)
        spec = effects.Spec(
            name=name, fn=fn, args=args, kwargs=kwargs, key=key, check=check,
            compensate=compensate,
            idempotent=bool(idempotent), dedup_window=window, retry=retry or NO_RETRY,
            timeout=timeout,
            poll_every=poll_every, uncertain=uncertain, tool=tool, reason=reason,
            cost=cost, contract=contract,
        )
        addr = addresses.reserve()
        return await effects.Effect(self._x, addr, spec).run()

    # -- workspaces ----------------------------------------------------------
    async def workspace(
        self, name: str, path: str | os.PathLike[str], *,
        root: str | os.PathLike[str] | None = None,
        max_bytes: int | None = WORKSPACE_MAX_BYTES, blobs: str | None = None,
    ) -> workspaces.Workspace:
        """Attach the directory `path` (inside `root`: by default
        `$STEAD_WORKSPACE_ROOT`, else the current directory) to the run as
        workspace `name`; `await ws.save()` snapshots it durably (its blobs in
        the run's database, or under the fsspec URL `blobs`), at most
        `max_bytes` of files. Each step that changes it is saved with its
        result, in one fenced transaction (`workspaces.StepSaves`): a takeover
        restores what the step made and does not redo it. After a takeover, `ws.path` is the fresh
        directory its last snapshot was restored into, on this worker."""
        from stead.workflow import workspaces

        bounds.optional_text(name, "a workspace's name")
        ws = await workspaces.attach(self._x, name, path, root=root, max_bytes=max_bytes,
                                     blob_url=blobs)
        if self._saves is None:
            self._saves = workspaces.StepSaves(self._x)
        self._saves.attached(ws)
        return ws
