"""The one place user code is called: async functions are awaited, sync ones
run in a thread so they never block the worker's event loop. User code runs
outside the run's branches, so tasks it creates do not shift call addresses."""

from __future__ import annotations

import contextlib
import inspect
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stead import addresses, threads

# By function: asking inspect costs a few µs, at every step. Weak keys: a
# cached function is not kept alive.
_ASYNC: weakref.WeakKeyDictionary[Callable[..., Any], bool] = weakref.WeakKeyDictionary()


def is_async(fn: Callable[..., Any]) -> bool:
    try:
        return _ASYNC[fn]
    except (KeyError, TypeError):  # not seen yet, or not weakly referenceable
        pass
    found = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    )
    with contextlib.suppress(TypeError):
        _ASYNC[fn] = found
    return found


async def invoke(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], *,
                 inline: bool = False) -> Any:
    """Call `fn`; a sync one in a thread, or with `inline` (a step with no
    timeout) on the loop's thread once it has shown itself quick (see `threads`)."""
    with addresses.outside_branches():
        if is_async(fn):
            return await fn(*args, **kwargs)
        value = await threads.call(fn, args, kwargs, inline=inline)
        if inspect.isawaitable(value):
            value = await value
        return value
