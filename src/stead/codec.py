"""JSON in and out, never pickle: a stored row must never be able to run code.

Values are encoded once, when they are recorded; what the workflow gets back,
live or on replay, is always the *decoded* form, converted to the declared type
when one is known. So a live run and its replay see identical values.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime as dt
import enum
import functools
import hashlib
import inspect
import json
import typing
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from stead import bounds, errors

_PLAIN = (dict, list, str, int, float, bool)


def _default(value: Any) -> Any:
    hook = getattr(type(value), "__stead_redacted__", None)
    if hook is not None:  # a wait token (or its wait): stored as a reference
        return hook(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # a pydantic model
        return dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"{type(value).__qualname__} is not JSON-serialisable")


# The encoders `dumps` and `canonical` use, made once: `json.dumps` given
# options builds a new encoder at every call, and a step encodes several
# values. An encoder keeps nothing between calls (its `encode` is reentrant).
_STORED = json.JSONEncoder(default=_default, separators=(",", ":"), allow_nan=False)
_CANONICAL = json.JSONEncoder(default=_default, separators=(",", ":"), sort_keys=True,
                              allow_nan=False)


def dumps(
    value: Any, *, what: str, secrets: Secrets | None = None, limit: int | None = None,
) -> str:
    """Encode `value` for storage; `what` names it in the error message. With
    a `limit`, JSON text longer than `limit` bytes raises `ResultTooLarge`.
    The text is refused (`SecretInJournal`) if it holds one of `secrets`, by
    default the live secrets of the run being executed (see `watch`)."""
    try:
        text = _STORED.encode(value)
    except RecursionError as exc:
        raise errors.SerializationError(
            f"{what} cannot be stored as JSON: it is nested too deeply. Flatten it."
        ) from exc
    except (TypeError, ValueError) as exc:
        raise errors.SerializationError(
            f"{what} cannot be stored as JSON: {exc}. Use dicts, lists, str, numbers, "
            "bool, None, datetimes, UUIDs, dataclasses or pydantic models."
        ) from exc
    bounds.json_text(text, what)  # a NUL is kept, escaped; a lone surrogate is not text
    # The text is ASCII (non-ASCII is escaped), so its length is its size in bytes.
    if limit is not None and len(text) > limit:
        raise errors.ResultTooLarge(
            f"{what} is {size(len(text))} as JSON, over the limit of {size(limit)} for one "
            "journaled value. Keep large data outside (a file, a bucket) and journal a "
            "reference to it, or raise the limit (WorkerOptions.max_result_bytes)."
        )
    live = secrets if secrets is not None else _WATCHED.get()
    if live is not None:
        live.check(text, what)
    return text


class Secrets:
    """The live secrets of one run (its wait tokens, as text): a value whose
    encoded JSON holds one is refused before it is stored. One substring
    search per secret, over text that was just encoded anyway."""

    def __init__(self) -> None:
        self._labels: dict[str, str] = {}  # secret -> the wait id it belongs to

    def add(self, secret: str, wait_id: str) -> None:
        self._labels[secret] = wait_id

    def check(self, text: str, what: str) -> None:
        for secret, wait_id in self._labels.items():
            if secret in text:
                raise errors.SecretInJournal(what, wait_id)

    def mask(self, text: str) -> str:
        """`text` with every secret replaced by `****` (for error messages)."""
        for secret in self._labels:
            text = text.replace(secret, "****")
        return text


_WATCHED: contextvars.ContextVar[Secrets | None] = contextvars.ContextVar(
    "stead_secrets", default=None)
# No secrets to refuse: for text that masks them itself (`masked`).
UNCHECKED = Secrets()


def masked(text: str) -> str:
    """`text` with the live secrets of the run being executed replaced by
    `****` (see `watch`): for what is shown, not replayed."""
    live = _WATCHED.get()
    return text if live is None else live.mask(text)


def watch(secrets: Secrets) -> None:
    """From now on in this context (a run's body and the tasks it starts),
    `dumps` refuses values that hold one of `secrets`."""
    _WATCHED.set(secrets)


def size(n: int) -> str:
    """A byte count for people: 512 bytes, 256 KB, 16.0 MB."""
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.0f} KB"
    return f"{n / (1024 * 1024):.1f} MB"


def loads(text: str) -> Any:
    """Decode JSON text; JSON nested too deeply to decode raises
    `SerializationError`."""
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise errors.SerializationError(
            "JSON nested too deeply to decode; flatten it"
        ) from exc


def describe(exc: BaseException) -> str:
    """An error in one line: pydantic's validation errors as `where: what`
    for each problem, without their documentation links."""
    problems = getattr(exc, "errors", None)
    if callable(problems):
        try:
            found = problems(include_url=False)
        except TypeError:
            found = None
        if isinstance(found, list) and found:
            parts = []
            for problem in found[:3]:
                where = ".".join(str(p) for p in problem.get("loc", ()))
                msg = str(problem.get("msg", ""))
                if "input" in problem and problem.get("type") != "missing":
                    got = " ".join(repr(problem["input"]).split())
                    msg += f" (got {got if len(got) <= 60 else got[:59] + '…'})"
                parts.append(f"{where}: {msg}" if where else msg)
            more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
            return "; ".join(parts) + more
    return " ".join(str(exc).split())


DIGEST_CHARS = 32  # hex characters of sha256 kept in a digest


def canonical(value: Any) -> str:
    """The canonical JSON text of `value` that digests hash: sorted keys, no
    spaces, secrets as references (a wait token or wait encodes as one, see
    `_default`)."""
    try:
        return _CANONICAL.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise errors.SerializationError(
            f"arguments cannot be stored as JSON: {exc}. Pass JSON-compatible values."
        ) from exc


def digest(*parts: Any) -> str:
    """A stable fingerprint of call arguments, independent of dict key order
    (secrets enter it as references, never as values). `digests.Digests`
    computes the same fingerprint incrementally for a growing list argument."""
    return hashlib.sha256(canonical(parts).encode()).hexdigest()[:DIGEST_CHARS]


@functools.lru_cache(maxsize=512)
def _adapter(annotation: Any) -> Any:
    import pydantic  # deferred: only workflows with declared rich types pay for it

    return pydantic.TypeAdapter(annotation)


def convert(value: Any, annotation: Any) -> Any:
    """Turn a decoded JSON value into `annotation` (pydantic models, dataclasses,
    datetimes, tuples...). Unknown or plain annotations leave the value as is."""
    if annotation in (None, Any, object, inspect.Parameter.empty):
        return value
    if annotation in _PLAIN and isinstance(value, annotation):
        return value
    if annotation is type(None) and value is None:
        return None
    try:
        return _adapter(annotation).validate_python(value)
    except TypeError:  # unhashable or unsupported annotation: leave the JSON value
        return value


def decode(text: str, annotation: Any = None) -> Any:
    return convert(json.loads(text), annotation)


# Resolved return types by function: resolving string annotations (`from
# __future__ import annotations`) costs ~20 µs, paid at every step and at every
# step of a replay otherwise. Weak keys: a cached function is not kept alive.
_RETURN_TYPES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def return_type(fn: Callable[..., Any]) -> Any:
    """The declared return type of `fn`, or None when it has none we can resolve."""
    try:
        return _RETURN_TYPES[fn]
    except (KeyError, TypeError):  # not seen yet, or not weakly referenceable
        pass
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # forward references we cannot resolve: no conversion (not cached)
        return None
    ret = hints.get("return")
    origin = typing.get_origin(ret)
    if origin is not None and getattr(origin, "__name__", "") in {"Coroutine", "Awaitable"}:
        args = typing.get_args(ret)
        ret = args[-1] if args else None
    with contextlib.suppress(TypeError):
        _RETURN_TYPES[fn] = ret
    return ret


def json_schema(annotation: Any) -> Any:
    """The JSON Schema of a type (a pydantic model, a dataclass, a TypedDict...)."""
    return _adapter(annotation).json_schema()


def parameter_types(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return dict(typing.get_type_hints(fn))
    except Exception:
        return {}
