"""Arguments by parameter name, as a person reads them.

A call's arguments are stored as JSON, `{"args": [...], "kwargs": {...}}`:
values without the names they were passed to. `names` binds a call to its
function's signature when it is made (positional and keyword alike) and
gives the name of each positional value, which a record stores beside them
as `"names"`; `table` reads a stored value back as (name, value) rows. A
record written before names were kept (no `"names"`) still reads: its
positions are named `#0`, `#1`, ... unless a signature is at hand to name
them (`table(stored, fn)`, the workflow of a run's input).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def names(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], *,
          skip: int = 1) -> list[str] | None:
    """The parameter name of each of `args` in a call of `fn` whose first
    `skip` parameters (the run, the operation) the caller passes itself; a
    value taken by `*args` is named `name[i]`. None when the call does not
    bind (it fails on its own; nothing to name) or `fn` has no signature."""
    try:
        signature = inspect.signature(fn)
        signature.bind(*([None] * skip), *args, **kwargs)
    except (TypeError, ValueError):
        return None
    params = list(signature.parameters.values())[skip:]
    found: list[str] = []
    for p in params:
        if len(found) == len(args):
            break
        if p.kind in _POSITIONAL:
            found.append(p.name)
        elif p.kind == inspect.Parameter.VAR_POSITIONAL:
            found.extend(f"{p.name}[{i}]" for i in range(len(args) - len(found)))
    return found


def table(stored: Any, fn: Callable[..., Any] | None = None, *, skip: int = 1
          ) -> list[tuple[str, Any]] | None:
    """`stored` (`{"args", "kwargs"[, "names"]}`) as (name, value) rows in
    call order, keyword arguments after the positional ones; names come
    from the record, else from `fn`'s signature, else the position (`#0`).
    None when `stored` is not arguments in that shape."""
    if not isinstance(stored, Mapping):
        return None
    args, kwargs = stored.get("args"), stored.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, Mapping):
        return None
    given = stored.get("names")
    named = (given if isinstance(given, list) and len(given) == len(args)
             and all(isinstance(n, str) for n in given) else None)
    if named is None and fn is not None:
        named = names(fn, args, kwargs, skip=skip)
    rows = [(named[i] if named else f"#{i}", value) for i, value in enumerate(args)]
    return rows + [(str(k), v) for k, v in kwargs.items()]
