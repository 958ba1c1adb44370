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

import dataclasses
import inspect
import types
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
# Signatures of plain functions, by what decides them: `inspect.signature`
# costs about 15 µs, a twentieth of a step on SQLite, and a step's function
# is named at every call. Keyed by the code, not the function, so that a
# closure made anew at each call (`run.step("x", lambda: ...)`) is one entry
# and what it captured is not kept alive; emptied when full.
_SIGNATURES: dict[Hashable, Signed] = {}
_MOST_SIGNATURES = 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Signed:
    """A function's signature and, when every parameter is positional (no
    `*args`, keyword-only or `**kwargs`), their names and how many have no
    default: then a call of positional values binds when it gives at least
    that many and at most them all, which `names` checks without binding."""

    signature: inspect.Signature
    positional: tuple[str, ...] | None
    required: int


def _signed(signature: inspect.Signature) -> Signed:
    params = list(signature.parameters.values())
    if any(p.kind not in _POSITIONAL for p in params):
        return Signed(signature, None, 0)
    return Signed(signature, tuple(p.name for p in params),
                  sum(1 for p in params if p.default is inspect.Parameter.empty))


def names(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], *,
          skip: int = 1) -> list[str] | None:
    """The parameter name of each of `args` in a call of `fn` whose first
    `skip` parameters (the run, the operation) the caller passes itself; a
    value taken by `*args` is named `name[i]`. None when the call does not
    bind (it fails on its own; nothing to name) or `fn` has no signature."""
    try:
        signed = _found(fn)
        if signed.positional is not None and not kwargs:  # the common case, unbound
            given = skip + len(args)
            fits = signed.required <= given <= len(signed.positional)
            return list(signed.positional[skip:given]) if fits else None
        signature = signed.signature
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


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    return _found(fn).signature


def _found(fn: Callable[..., Any]) -> Signed:
    """`inspect.signature(fn)`, kept for a plain function (one with no
    `__signature__` of its own). `__wrapped__` (functools.wraps) is part of
    the key: wrappers share their code but show the wrapped function's
    parameters."""
    if type(fn) is not types.FunctionType or "__signature__" in fn.__dict__:
        return _signed(inspect.signature(fn))
    key = (fn.__code__, fn.__defaults__, fn.__kwdefaults__, fn.__dict__.get("__wrapped__"))
    try:
        found = _SIGNATURES.get(key)
    except TypeError:  # an unhashable default (a list)
        return _signed(inspect.signature(fn))
    if found is None:
        found = _signed(inspect.signature(fn))
        if len(_SIGNATURES) >= _MOST_SIGNATURES:
            _SIGNATURES.clear()
        _SIGNATURES[key] = found
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
