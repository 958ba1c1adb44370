"""A workflow's input: its arguments as a run stores them (JSON text,
`{"args": [...], "kwargs": {...}}`, with `"names"`, each positional
argument's parameter name, when a start knows the workflow's function:
`stead.arguments`), and their binding to the workflow function's
parameters and declared types.

Starting a run binds the input as stored, so arguments that would fail every
attempt are refused then (`Client.start`); every takeover binds it again to
call the workflow (`takeover.decode_input`).
"""

from __future__ import annotations

import inspect
import json
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stead import codec, errors
from stead.app import Workflow


def encode(args: Sequence[Any], kwargs: Mapping[str, Any], *, workflow: str,
           names: Sequence[str] | None = None) -> str:
    """The stored input, with the positional arguments' parameter `names`
    when given; raises `SerializationError` if it is not JSON."""
    data: dict[str, Any] = {"args": list(args), "kwargs": dict(kwargs)}
    if names is not None:
        data["names"] = list(names)
    return codec.dumps(data, what=f"the input of workflow {workflow!r}")


def decode(text: str) -> tuple[list[Any], dict[str, Any]]:
    """The arguments of a stored input. Raises ValueError, KeyError or
    TypeError when `text` is not one."""
    data = json.loads(text)
    return list(data["args"]), dict(data["kwargs"])


_Shape = tuple[inspect.Signature, list[inspect.Parameter], dict[str, Any]]
# By workflow function: resolving string annotations compiles each one, ~0.3 ms
# a run otherwise, at every start and every takeover. Weak keys: a cached
# function is not kept alive.
_SHAPES: weakref.WeakKeyDictionary[Callable[..., Any], _Shape] = weakref.WeakKeyDictionary()


def _parameters(fn: Callable[..., Any]) -> _Shape:
    """`fn`'s signature, its parameters after `run`, and their resolved types."""
    shape = _SHAPES.get(fn)
    if shape is None:
        signature = inspect.signature(fn)
        params = list(signature.parameters.values())[1:]  # skip `run`
        hints = codec.parameter_types(fn)
        shape = (signature, params, hints)
        if hints or not getattr(fn, "__annotations__", None):
            _SHAPES[fn] = shape  # unresolvable annotations are tried again next time
    return shape


def bind(
    wf: Workflow[Any, Any], args: list[Any], kwargs: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """Fit decoded JSON arguments to the workflow's parameters and declared
    types. Raises TypeError or ValueError (pydantic's) when they do not fit."""
    signature, params, hints = _parameters(wf.fn)
    signature.bind(None, *args, **kwargs)
    args, kwargs = list(args), dict(kwargs)
    for i, value in enumerate(args):
        if i < len(params) and params[i].kind in (
            inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD
        ):
            args[i] = _convert(params[i].name, value, hints.get(params[i].name))
    for key, value in kwargs.items():
        kwargs[key] = _convert(key, value, hints.get(key))
    return args, kwargs


def _convert(name: str, value: Any, annotation: Any) -> Any:
    try:
        return codec.convert(value, annotation)
    except ValueError as exc:  # pydantic's ValidationError: name the parameter, in one line
        raise ValueError(f"{name}: {codec.describe(exc)}") from exc


def check(wf: Workflow[Any, Any], text: str) -> None:
    """Bind a stored input as every takeover will: arguments that would fail
    every attempt are refused (`InvalidInput`) before a run holds them."""
    args, kwargs = decode(text)
    try:
        bind(wf, args, kwargs)
    except (TypeError, ValueError) as exc:
        raise errors.InvalidInput(
            f"these arguments do not fit workflow {wf.key}: {codec.describe(exc)}"
        ) from exc
