"""`Scoped`: a `Store` as one tenant sees it (see `stead.tenant_scope`).

It has the store's operations (it is typed as one where a `Client` holds
it) and applies each one's rule (`rules.RULES`) around the store's own: the
run (or wait, or task) an operation names is looked up first, and another
tenant's is `UnknownRun`, as a run that is not there; lists are asked for
the tenant's runs alone; new runs serve the tenant. A run's tenant never
changes, so the tenant of each run looked at is remembered (at most
`REMEMBERED` of them), and a stream followed for minutes costs one lookup.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from stead import errors
from stead.searches import RunSearch
from stead.tenant_scope.rules import ATTRIBUTES, RULES, Rule

REMEMBERED = 10_000
# How many of a task's runs are read to tell whose the task is.
TASK_RUNS = 50


def _outside(tenant: str, what: str) -> errors.OutsideTenant:
    return errors.OutsideTenant(
        f"this client is scoped to tenant {tenant!r} and {what}; use a client scoped to "
        "the other tenant, or an unscoped Client for work across tenants")


class Scoped:
    """`store` as tenant `tenant` sees it."""

    def __init__(self, store: Any, tenant: str) -> None:
        self._store = store
        self.tenant = tenant
        self._tenants: dict[str, str | None] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # copy, pickle and hasattr probes: not an operation
            raise AttributeError(name)
        if name in ATTRIBUTES:
            return getattr(self._store, name)
        rule = RULES.get(name)
        if rule is None:
            raise _outside(self.tenant, f"Store.{name} reads or changes runs of every "
                           "tenant")
        method = getattr(self._store, name)
        if rule is Rule.FREE:
            return method
        if rule is Rule.FILTERED:
            return self._filtered(method)
        if rule is Rule.CREATES:
            return self._creating(method)
        return self._checked(method, rule)

    # -- whose is it ---------------------------------------------------------------
    async def _tenant_of(self, run_id: str) -> str | None:
        if run_id in self._tenants:
            return self._tenants[run_id]
        try:
            row = await self._store.get_run(run_id)
        except errors.UnknownRun:
            return None
        if len(self._tenants) >= REMEMBERED:
            self._tenants.clear()
        tenant: str | None = row.tenant
        self._tenants[run_id] = tenant
        return tenant

    async def _own(self, run_id: str) -> None:
        """Return if `run_id` is one of the tenant's runs; else `UnknownRun`."""
        if not isinstance(run_id, str) or await self._tenant_of(run_id) != self.tenant:
            raise errors.UnknownRun(f"no run {run_id!r} of tenant {self.tenant!r}")

    async def _own_wait(self, wait_id: str) -> bool:
        wait = await self._store.get_wait(wait_id)
        return wait is not None and await self._tenant_of(wait.run_id) == self.tenant

    async def _own_task(self, task_key: str) -> None:
        """Return if the task is the tenant's: a run's own (`run:<id>`), or a
        task whose runs (the newest `TASK_RUNS`) are all the tenant's."""
        if task_key.startswith("run:"):
            await self._own(task_key[4:])
            return
        runs = await self._store.search_runs(RunSearch(task_id=task_key, limit=TASK_RUNS))
        if not runs or any(r.tenant != self.tenant for r in runs):
            raise _outside(self.tenant, f"task {task_key!r} is not the tenant's alone")

    def _runs_named(self, args: inspect.BoundArguments) -> list[str]:
        """The runs an operation's arguments name."""
        named: list[str] = []
        for key, value in args.arguments.items():
            if key == "run_id":
                named.append(value)
            elif key == "run_ids":
                named.extend(value)
            elif isinstance(getattr(value, "run_id", None), str):
                named.append(value.run_id)
            elif isinstance(getattr(value, "parent_id", None), str):
                named.append(value.parent_id)
        return named

    # -- the rules -----------------------------------------------------------------
    def _checked(self, method: Callable[..., Any], rule: Rule) -> Callable[..., Any]:
        signature = inspect.signature(method)

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._after_check(method, rule, signature.bind(*args, **kwargs))

        return call

    async def _after_check(self, method: Callable[..., Any], rule: Rule,
                           bound: inspect.BoundArguments) -> Any:
        if rule is Rule.RUN:
            named = self._runs_named(bound)
            if not named:
                raise _outside(self.tenant, f"Store.{name_of(method)} names no run")
            for run_id in named:
                await self._own(run_id)
        elif rule is Rule.WAIT:
            wait_id = bound.arguments["wait_id"]
            if not await self._own_wait(wait_id):
                if name_of(method) in ("get_wait", "wait_and_event"):
                    return None
                raise errors.UnknownRun(f"no wait {wait_id!r} of tenant {self.tenant!r}")
        elif rule is Rule.TASK:
            named_task = bound.arguments.get("task_key", bound.arguments.get("task_id"))
            await self._own_task(str(named_task))
        elif rule is Rule.TENANT:
            asked = bound.arguments["tenant"]
            if asked != self.tenant:
                raise _outside(self.tenant, f"cannot read what tenant {asked!r} holds")
        elif rule is Rule.LISTED:
            return await self._listed(method, bound)
        return await method(*bound.args, **bound.kwargs)

    async def _listed(self, method: Callable[..., Any], bound: inspect.BoundArguments) -> Any:
        if "search" in bound.arguments:
            search = bound.arguments["search"]
            if search.tenant not in (None, self.tenant):
                return []
            bound.arguments["search"] = dataclasses.replace(search, tenant=self.tenant)
        else:
            asked = bound.arguments.get("tenant")
            if asked not in (None, self.tenant):
                raise _outside(self.tenant, f"cannot list the runs of tenant {asked!r}")
            run_id = bound.arguments.get("run_id")
            if run_id is not None:
                await self._own(run_id)
            bound.arguments["tenant"] = self.tenant
        return await method(*bound.args, **bound.kwargs)

    def _filtered(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            found = await method(*args, **kwargs)
            if found is None:
                return None
            if isinstance(found, list):
                return [x for x in found if await self._theirs(x)]
            return found if await self._theirs(found) else None

        return call

    async def _theirs(self, row: Any) -> bool:
        run = getattr(row, "run", row)  # a stranded run wraps its row
        return bool(await self._tenant_of(run.run_id) == self.tenant)

    def _creating(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        async def call(first: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(first, Sequence):
                first = [self._serving(new) for new in first]
            else:
                first = self._serving(first)
            return await method(first, *args, **kwargs)

        return call

    def _serving(self, new: Any) -> Any:
        """`new` (a run to create) serving the tenant."""
        if new.tenant is None:
            return dataclasses.replace(new, tenant=self.tenant)
        if new.tenant != self.tenant:
            raise _outside(self.tenant, f"cannot start a run of tenant {new.tenant!r}")
        return new


def name_of(method: Callable[..., Any]) -> str:
    return str(getattr(method, "__name__", ""))
