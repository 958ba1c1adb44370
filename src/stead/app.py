"""`App`: the registry of workflows and their versions. No global singleton:
the worker, the client and the CLI are handed an App (`module:app`)."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar

from stead import bounds, errors, stepcode
from stead.policy_points import PolicyPoint, policy_points
from stead.records import Missed

# What only some apps use (queues, schedules, migrations, a policy, declared
# tools) is imported where it is declared or checked: `stead worker` starts
# without the modules of the features its app does not use.
if TYPE_CHECKING:
    from stead.intent import Intent, Matcher
    from stead.migrations import Migration, MigrationFn
    from stead.policy import Policy, PolicyFn
    from stead.queues import Period, Queue
    from stead.run import Run
    from stead.schedules import Schedule
    from stead.tenants.fair import Policy as TenantPolicy

P = ParamSpec("P")
R = TypeVar("R")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


@dataclasses.dataclass(frozen=True)
class Workflow(Generic[P, R]):
    """A registered workflow: its name, its version and the function. It keeps
    the function's signature, so `client.start(wf, ...)` is type-checked."""

    name: str
    version: int
    fn: Callable[Concatenate[Run, P], Coroutine[Any, Any, R]]

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"


class App:
    """`policy` (or `@app.policy`) revalidates every run at each takeover and
    wake, where the run first acts live, and before each effect's intent
    commits (see `stead.policy`); `policy_version` is recorded with its
    decisions. `policy_on=("effect", "llm")` asks it before every live model
    call too (the effect is always asked). `matchers` are the named
    functions a grant's scope may call on (`{"matcher": "name"}`).

    `tools` names the tools the app's effects call (`run.effect(..., tool=)`):
    given, an intent granting any other tool is refused with `InvalidIntent`
    naming it (at `Client.start(intent=)`, `stead start --intent`,
    `Client.resume(intent=)`, `run.intent`, `Client.renew_grant`). Without
    it the app does not know its tools and grants are not checked against
    them (a grant for a tool no effect calls then simply goes unused).

    `changed_steps` says what a takeover does with a journaled step result
    whose function's code changed since (see `stead.stepcode`): `"warn"`
    (the default) reuses it, logs a warning and names it in the resume
    record; `"rerun"` makes it again when nothing acted outside after it
    (else the run pauses for a person); `"stop"` stops the run as
    `incompatible_checkpoint` naming the step."""

    def __init__(self, name: str, *, policy: PolicyFn | None = None,
                 policy_version: str = "1",
                 matchers: dict[str, Matcher] | None = None,
                 tools: Iterable[str] | None = None,
                 policy_on: Iterable[str] = ("effect",),
                 changed_steps: str = stepcode.ChangedSteps.WARN) -> None:
        self.name = name
        try:
            self.changed_steps = stepcode.ChangedSteps(changed_steps)
        except ValueError:
            raise ValueError(
                f"changed_steps is one of {', '.join(repr(str(c)) for c in stepcode.ChangedSteps)}"
                f", not {changed_steps!r}") from None
        self.policy_on: frozenset[PolicyPoint] = policy_points(policy_on)
        self._workflows: dict[tuple[str, int], Workflow[Any, Any]] = {}
        self._migrations: dict[tuple[str, int], Migration] = {}
        self.current_policy: Policy | None = None
        if policy is not None:
            from stead.policy import Policy

            self.current_policy = Policy(policy, policy_version)
        self.matchers: dict[str, Matcher] = dict(matchers or {})
        self.tools: frozenset[str] | None = None if tools is None else _tool_names(tools)
        self._schedules: dict[str, Schedule] = {}
        self.queues: dict[str, Queue] = {}
        # The tenants' weights and limits (`tenant`, `tenants`); None: every
        # tenant weighs one and has no limit.
        self.tenant_policy: TenantPolicy | None = None

    def queue(self, name: str, *, concurrency: int | None = None,
              per_worker: int | None = None, rate: tuple[int, Period] | None = None,
              priority: bool = False, tenant: str | None = None) -> Queue:
        """Declare queue `name`: at most `concurrency` of its runs execute at
        once across every worker of the database, `per_worker` on one worker,
        and `rate=(100, "1m")` start per period. With `priority`, runs may be
        started with a priority (lower first). With `tenant`, the queue holds
        that tenant's runs alone (a run started in it serves that tenant).
        Workers of this app claim the queue's runs under these limits
        (`client.start(..., queue=name)`)."""
        from stead import queues

        if name in self.queues:
            raise ValueError(f"queue {name!r} is declared twice")
        made = queues.define(name, concurrency=concurrency, per_worker=per_worker, rate=rate,
                             priority=priority, tenant=tenant)
        self.queues[name] = made
        return made

    def tenant(self, name: str, *, weight: int = 1, concurrency: int | None = None,
               rate: tuple[int, Period] | None = None) -> None:
        """Give tenant `name` its own `weight` (its share of the workers against
        the other tenants with runs ready: 2 is twice a tenant of 1) and limits:
        at most `concurrency` of its runs execute at once across every worker
        of the database, and `rate=(100, "1m")` start per period. Tenants not
        named take what `tenants(...)` says (by default: weight 1, no limit)."""
        from stead.tenants import fair

        made = fair.limits(weight=weight, concurrency=concurrency, rate=_rate(rate),
                           what=f"tenant {name!r}")
        self.tenant_policy = fair.with_tenant(self.tenant_policy or fair.Policy(), name, made)

    def tenants(self, *, weight: int = 1, concurrency: int | None = None,
                rate: tuple[int, Period] | None = None) -> None:
        """The weight and limits of every tenant `tenant(...)` does not name
        (runs started without a tenant count as one more tenant): see `tenant`."""
        from stead.tenants import fair

        made = fair.limits(weight=weight, concurrency=concurrency, rate=_rate(rate),
                           what="every tenant")
        named = {} if self.tenant_policy is None else dict(self.tenant_policy.named)
        self.tenant_policy = fair.Policy(made, named)

    def get_queue(self, name: str) -> Queue:
        """The queue declared as `name`; `UnknownQueue` if there is none."""
        if name not in self.queues:
            known = ", ".join(sorted(self.queues)) or "none"
            raise errors.UnknownQueue(
                f"app {self.name!r} declares no queue {name!r} (declared: {known}); "
                "declare it with app.queue(...)")
        return self.queues[name]

    def check_intent(self, intent: Intent) -> None:
        """Raise `InvalidIntent` if `intent` grants a tool this app does not
        know (nothing to check if it declares no `tools`)."""
        from stead import intent as intents

        intents.check_tools(intent, self.tools, self.name)

    def check_tool(self, tool: str) -> None:
        from stead import intent as intents

        intents.check_tool(tool, self.tools, self.name)

    def policy(self, *, version: str = "1") -> Callable[[PolicyFn], PolicyFn]:
        """Register `fn(intent, state, run, action)` as the app's policy, at
        `version`: `@app.policy(version="refunds@8")`."""
        if not isinstance(version, str) or not version:
            raise ValueError("a policy version is a non-empty string")

        def register(fn: PolicyFn) -> PolicyFn:
            from stead.policy import Policy

            self.current_policy = Policy(fn, version)
            return fn

        return register

    def matcher(self, name: str) -> Callable[[Matcher], Matcher]:
        """Register `fn(arguments, scope) -> bool` for grants whose scope says
        `{"matcher": name}`."""
        def register(fn: Matcher) -> Matcher:
            self.matchers[name] = fn
            return fn

        return register

    def workflow(
        self, *, name: str | None = None, version: int = 1
    ) -> Callable[[Callable[Concatenate[Run, P], Coroutine[Any, Any, R]]], Workflow[P, R]]:
        """Register an `async def fn(run, ...)` under `name` (default: the
        function's name) and `version`. Register an old version next to a new one
        to let runs that started on it finish."""
        if not isinstance(version, int) or version < 1:
            raise ValueError("workflow version must be a positive integer")
        bounds.version(version, "a workflow's version")

        def register(fn: Callable[Concatenate[Run, P], Coroutine[Any, Any, R]]) -> Workflow[P, R]:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(
                    f"workflow {getattr(fn, '__name__', fn)!r} must be an `async def` "
                    "function: its calls to run.* are awaited"
                )
            wf_name = name or fn.__name__
            if not _NAME.match(wf_name):
                raise ValueError(f"workflow name {wf_name!r} must be an identifier-like word")
            if (wf_name, version) in self._workflows:
                raise ValueError(f"workflow {wf_name}@{version} is registered twice")
            wf: Workflow[P, R] = Workflow(wf_name, version, fn)
            self._workflows[(wf_name, version)] = wf
            return wf

        return register

    def schedule(
        self, cron: str, *, name: str | None = None, missed: Missed | str = Missed.ONCE,
        grace: float = 10.0, tenant: str | None = None,
    ) -> Callable[[Any], Workflow[Any, Any]]:
        """Start a run of the decorated workflow at every tick of `cron` (UTC;
        five fields, or six with seconds last), exactly once per tick across
        every worker of the database. The run gets the tick (ISO 8601) as its
        one argument and `schedule:<name>@<tick>` as its task id. Ticks missed
        while no worker ran: `missed="skip"` (fired only up to `grace`
        seconds late), `"once"` (one run, for the latest) or `"all"`. With
        `tenant`, each run serves that tenant (`stead.tenants`). Put it
        above `@app.workflow(...)`, or on a plain `async def` (registered as
        version 1)."""
        from stead import schedules, tenants

        policy = schedules.check(cron, missed, grace)
        tenants.check(tenant, "a schedule's tenant=")

        def register(target: Any) -> Workflow[Any, Any]:
            wf: Workflow[Any, Any] = target if isinstance(target, Workflow) \
                else self.workflow()(target)
            bounds.text(name or wf.name, "a schedule's name", errors.InvalidSchedule)
            sched = schedules.Schedule(name or wf.name, cron, wf.name, wf.version, policy, grace,
                                       tenant)
            if sched.name in self._schedules:
                raise ValueError(f"schedule {sched.name!r} is registered twice")
            self._schedules[sched.name] = sched
            return wf

        return register

    @property
    def schedules(self) -> list[Schedule]:
        return list(self._schedules.values())

    def get(self, name: str, version: int | None = None) -> Workflow[Any, Any]:
        """The workflow `name` at `version` (default: the newest registered)."""
        if version is None:
            versions = [v for (n, v) in self._workflows if n == name]
            if versions:
                return self._workflows[(name, max(versions))]
        elif (name, version) in self._workflows:
            return self._workflows[(name, version)]
        known = ", ".join(sorted(w.key for w in self._workflows.values())) or "none"
        wanted = name if version is None else f"{name}@{version}"
        raise errors.UnknownWorkflow(
            f"app {self.name!r} has no workflow {wanted} (registered: {known})"
        )

    def migration(self, workflow: str, *, from_version: int, to_version: int
                  ) -> Callable[[MigrationFn], MigrationFn]:
        """Register `fn(view) -> stead.Migrated` moving runs of `workflow`
        from `from_version` to `to_version` (see `stead.migrations`). A worker
        of this app that hosts `to_version` and not `from_version` applies it
        when it takes such a run, unless a live worker still hosts
        `from_version`; `stead runs migrate` applies it on demand."""
        for v in (from_version, to_version):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError("migration versions are positive integers")
        if from_version == to_version:
            raise ValueError("a migration goes from one version to another")
        if (workflow, from_version) in self._migrations:
            raise ValueError(f"a migration from {workflow}@{from_version} is registered twice")

        def register(fn: MigrationFn) -> MigrationFn:
            from stead.migrations import Migration

            self._migrations[(workflow, from_version)] = Migration(
                workflow, from_version, to_version, fn)
            return fn

        return register

    def migration_from(self, workflow: str, version: int) -> Migration | None:
        """The migration registered from `workflow@version`, if any."""
        return self._migrations.get((workflow, version))

    def migrations_path(self, workflow: str, version: int) -> list[Migration]:
        """The migrations that take a run of `workflow@version` to a version
        this app hosts, in order ([] if there is no such path, or the app
        hosts `version` itself)."""
        path: list[Migration] = []
        seen = {version}
        while (workflow, version) not in self._workflows:
            step = self._migrations.get((workflow, version))
            if step is None or step.to_version in seen:
                return []
            path.append(step)
            version = step.to_version
            seen.add(version)
        return path

    def migrated(self) -> list[str]:
        """`name@version` of every version this app does not host but can
        migrate to one it hosts."""
        return sorted(m.source for (name, version), m in self._migrations.items()
                      if (name, version) not in self._workflows
                      and self.migrations_path(name, version))

    def hosted(self) -> list[str]:
        """`name@version` of every workflow this app can run."""
        return sorted(w.key for w in self._workflows.values())

    @property
    def workflows(self) -> list[Workflow[Any, Any]]:
        return list(self._workflows.values())


def _tool_names(tools: Iterable[str]) -> frozenset[str]:
    names = [tools] if isinstance(tools, str) else list(tools)
    if isinstance(tools, str) or not all(isinstance(t, str) and t for t in names):
        raise ValueError("App(tools=...) takes a list of the tools' names, non-empty strings")
    return frozenset(names)


def _rate(rate: tuple[int, Period] | None) -> tuple[int, float] | None:
    """A `(count, period)` rate with its period in seconds."""
    if rate is None:
        return None
    from stead import queues

    if not isinstance(rate, tuple) or len(rate) != 2:
        raise ValueError("rate= takes (count, period), e.g. (100, '1m')")
    return rate[0], queues.parse_period(rate[1])
