"""A node (Graph API) or a task (Functional API), journaled.

Each execution is one `run.step` (or, for a node made by `effect`, a
write-ahead `run.effect`) holding what it returned, addressed by what
LangGraph names it: the pass of the graph, the superstep and the task's path
(`langgraph_step`, `langgraph_path` in its config), the same on every replay
whatever order parallel nodes finish in. A resumed run gets each recorded
result back, and the node is not run again.

A node that calls `interrupt()` is journaled as interrupted, with the value it
raised. LangGraph runs an interrupted node again from its start once it is
answered (its `Command(resume=)`); under stead that is the next pass, a new
call. On replay a recorded interrupt is raised again through LangGraph's own
`interrupt()` (the earlier ones of the same node take their recorded answers),
so the graph stops exactly where it stopped live, without running the node."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.config import get_config
from langgraph.errors import GraphInterrupt
from langgraph.func import task as langgraph_task
from langgraph.types import interrupt

import stead
from stead import calls, errors, threads
from stead.contrib._effect import Effect
from stead.contrib._scope import json_digest, safe_key
from stead.contrib.langgraph import _session, _values
from stead.contrib.langgraph._session import Session

# What an effect node's outcome is journaled as: its update (a Command in its
# constructor form, see `_values`), or None for no update. A decided outcome of
# another shape stops the run again rather than fail it.
Update = dict[str, Any] | None


class EffectNode:
    """A node whose execution is a stead effect (see `effect`)."""

    def __init__(self, fn: Callable[..., Any], options: Effect, name: str) -> None:
        self.fn = fn
        self.options = options
        self.__name__ = name
        functools.update_wrapper(self, fn, assigned=("__doc__", "__module__"))

    def __call__(self, state: Any) -> Any:
        raise errors.SteadError(
            f"effect node {self.__name__!r} acts only in a stead run: run the graph with "
            "stead.contrib.langgraph.run(run, graph, input)")

    async def sent(self, run: stead.Run, name: str, state: Any, what: str) -> Any:
        """`fn(op, state)` sent as the effect `name` of `run`: the update it
        returned, as JSON, or as its check or a person's reconciling says."""
        async def send(op: stead.Operation, _state: Any) -> Update:
            with _session.bound(None):
                update: Update = _values.encode(await calls.invoke(self.fn, (op, state), {}),
                                                what)
            return update

        return await self.options.send(run, name, send, _values.plain(state),
                                       outcome=lambda done: _values.checked(done, what))


def effect(fn: Callable[..., Any], *, key: str | None = None, check: Any = None,
           idempotent: bool = False, tool: str | None = None, reason: str | None = None,
           retry: stead.Retry | None = None, timeout: float | None = None,
           name: str | None = None) -> EffectNode:
    """A node for `StateGraph.add_node` whose execution is a stead effect:
    `fn(op, state)` runs at most once, its intent journaled before it runs,
    `op.key` its idempotency key (`key`, else one stead makes, the same on every
    attempt). After a crash an effect whose outcome is unknown is resent only
    if `idempotent`, else `check(op)` is asked, else the run stops for a person
    (`stead reconcile`). With `tool=`, it is sent only under a grant of the
    run's intent for that tool; `fn` gets it as `op.grant`."""
    return EffectNode(fn, Effect(key=key, check=check, idempotent=idempotent, tool=tool,
                                 reason=reason, retry=retry, timeout=timeout),
                      str(name or getattr(fn, "__name__", "effect")))


def _execution(config: RunnableConfig | None) -> str:
    """The execution's identity within the graph: its superstep and path."""
    meta = (config or {}).get("metadata") or {}
    step, path = meta.get("langgraph_step"), meta.get("langgraph_path")
    if step is None or path is None:
        raise errors.SteadError(
            "a journaled LangGraph node ran without LangGraph's task metadata: run the graph "
            "with stead.contrib.langgraph.run(run, graph, input)")
    return json.dumps([step, path], default=str, separators=(",", ":"))


async def journal(session: Session, kind: str, name: str, config: RunnableConfig | None,
                  state: Any, call: Callable[[], Awaitable[Any]],
                  effect_node: EffectNode | None = None) -> Any:
    """Run `call` (the node or task, given `state`) once, journaled."""
    execution = _execution(config)
    what = f"{kind} {name!r}"
    raised: list[GraphInterrupt] = []

    async def live(*_digested: Any) -> dict[str, Any]:
        with _session.bound(None):
            try:
                value = await call()
            except GraphInterrupt as exc:
                raised.append(exc)
                return {"interrupt": [_values.plain(i.value) for i in exc.args[0]]}
        return {"value": _values.encode(value, what)}

    run = session.run
    digest = json_digest(_values.plain(state))
    called = f"{session.passes}|{execution}"
    attempt = session.calls[called]
    session.calls[called] += 1
    with session.scope.at("n:" + safe_key(f"{called}|{attempt}")):
        if effect_node is not None:
            # The effect's outcome is the update itself, in the form its check
            # and a person reconciling it give it.
            return _values.decode(await effect_node.sent(run, f"{kind} {name}", state, what))
        data = await run.step(f"{kind} {name}", live, digest)
    if "interrupt" not in data:
        return _values.decode(data["value"])
    seen = session.interrupts.setdefault(execution, [])
    seen.extend(data["interrupt"])
    if raised:
        raise raised[0]
    # Replayed: LangGraph's own interrupt() hands the earlier ones their
    # answers and raises the last, as the node did.
    for value in seen:
        interrupt(value)
    raise errors.SteadError(
        f"{what} was journaled as interrupted, and every interrupt it raised now has an "
        "answer: the graph changed under the run. Register the old version alongside the "
        "new one, then `stead runs retry RUN`; or cancel the run.")


class JournaledNode(Runnable[Any, Any]):
    """A compiled graph's node (its `bound` runnable), journaled."""

    def __init__(self, inner: Runnable[Any, Any], name: str, session: Session) -> None:
        self.inner = inner
        self.node = name
        self._session = session
        func = getattr(inner, "func", None)
        self._effect = func if isinstance(func, EffectNode) else None

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        raise errors.SteadError(
            f"node {self.node!r} is journaled by stead and runs asynchronously: the graph is "
            "run by stead.contrib.langgraph.run")

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None,
                      **kwargs: Any) -> Any:
        effect_node = self._effect

        async def call() -> Any:
            return await self.inner.ainvoke(input, config, **kwargs)

        return await journal(self._session, "node", self.node, config, input, call,
                             effect_node)


def task(fn: Callable[..., Any] | None = None, *, name: str | None = None,
         **options: Any) -> Any:
    """`langgraph.func.task`, journaled in a stead run: each call of the task
    is one `run.step` holding its result, reused on replay. Outside a stead run
    it is LangGraph's task as it is. `options` go to `langgraph.func.task`
    (`retry_policy=`, `cache_policy=`). Used bare (`@task`) or called
    (`@task(name=...)`)."""
    if fn is None:
        return functools.partial(task, name=name, **options)
    task_name = name or fn.__name__

    async def body(*args: Any, **kwargs: Any) -> Any:
        session = _session.CURRENT.get()

        async def call() -> Any:
            if inspect.iscoroutinefunction(fn):
                return await fn(*args, **kwargs)
            return await threads.call(fn, args, kwargs)

        if session is None:
            return await call()
        return await journal(session, "task", task_name, get_config(), [args, kwargs], call)

    functools.update_wrapper(body, fn)
    return langgraph_task(name=task_name, **options)(body)
