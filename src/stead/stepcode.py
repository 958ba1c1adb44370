"""The digest of a step function's code, journaled with its result so a
takeover by code whose step body changed says so (see docs/architecture.md).

It covers the function's bytecode, its constants (nested functions and
lambdas included, recursively) and the names it reads: a changed body, a
changed literal or a call to another function changes it; a renamed local,
a comment or a moved line does not. It is stable across processes of one
Python version (bytecode differs between versions: a worker upgrade from
3.11 to 3.12 reads every step as changed). What the body calls is not
covered: a changed helper leaves the digest as it was. A callable without
code of its own (a builtin, a C extension) has no digest and is not judged.

The digest rides after the call's argument digest (see `coded`), so the
replay match, which compares the argument digest only, is what it was and
journals written without it replay as ever.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import inspect
import types
from collections.abc import Callable
from typing import Any

# The code digest follows the argument digest after this mark.
CODE_MARK = "~"
_CHARS = 16
_HEX = frozenset("0123456789abcdef")


class ChangedSteps(enum.StrEnum):
    """What a takeover does with a result whose step body changed since it
    was journaled (`App(changed_steps=...)`)."""

    WARN = "warn"  # reuse it, with a warning logged and in the resume record
    RERUN = "rerun"  # make it again when nothing acted after it; else pause
    STOP = "stop"  # stop as incompatible_checkpoint naming the step


def _code(fn: Callable[..., Any]) -> types.CodeType | None:
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = inspect.unwrap(fn)
    fn = getattr(fn, "__func__", fn)  # a bound method
    found = getattr(fn, "__code__", None)
    if found is None and not inspect.isroutine(fn):
        # A callable object: the code of its class's call method.
        found = getattr(vars(type(fn)).get("__call__"), "__code__", None)
    return found if isinstance(found, types.CodeType) else None


def _feed(h: Any, value: object) -> None:
    if isinstance(value, types.CodeType):
        h.update(b"C")
        h.update(value.co_code)
        h.update(repr(value.co_names).encode())
        for const in value.co_consts:
            _feed(h, const)
    elif isinstance(value, frozenset):
        # Set order follows string hashing, which differs per process.
        h.update(b"F")
        for text in sorted(repr(v) for v in value):
            h.update(text.encode())
    elif isinstance(value, tuple):
        h.update(b"T")
        for v in value:
            _feed(h, v)
    else:
        h.update(repr(value).encode())
    h.update(b"\0")


def digest(fn: Callable[..., Any]) -> str | None:
    """The digest of `fn`'s code (see the module's docstring); None for a
    callable without code of its own."""
    code = _code(fn)
    return None if code is None else _hashed(code)


@functools.lru_cache(maxsize=1024)
def _hashed(code: types.CodeType) -> str:
    h = hashlib.sha256()
    _feed(h, code)
    return h.hexdigest()[:_CHARS]


def coded(call_digest: str, code: str | None) -> str:
    """`call_digest` with the code digest after it (None: as it is)."""
    return call_digest if code is None else f"{call_digest}{CODE_MARK}{code}"


def code_of(stored: str) -> tuple[str, str | None]:
    """The call digest and the code digest a stored digest holds (None: it
    was journaled without one)."""
    base, mark, code = stored.rpartition(CODE_MARK)
    if mark and len(code) == _CHARS and set(code) <= _HEX:
        return base, code
    return stored, None
