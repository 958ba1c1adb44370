"""Digests of calls whose list argument grows: an agent's conversation.

A call's digest is the sha256 of the canonical JSON of its arguments
(`codec.digest`). An agent passes its whole conversation at every turn, so
hashing it from scratch costs O(conversation) per turn and O(turns²) per run.
But the canonical text of a list is `[`, its elements' texts joined by `,`,
then `]`, and sha256 streams: when the list has only grown since the last call
of the same name, the hash state after its old elements is copied and only the
new elements are encoded and fed. The digest is byte-identical to
`codec.digest`, so a fresh process (whose cache starts empty) replays what
this one journaled, and the other way round.

"Has only grown" is decided by comparing the list with a snapshot of the
elements already hashed: one `==`, run in C, over copies that share the
caller's strings (see `_freeze` for why that `==` can be trusted). The cache
belongs to one run (its `Execution`) and holds a few call names (LRU).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import uuid
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from stead import codec

SIZE = 16  # call names remembered per run
# A contract folded into a digest follows it after this mark (see `contracted`).
CONTRACT_MARK = "#"
MAX_CONTRACT_CHARS = 64
MIN_LENGTH = 8  # shorter list arguments of steps and effects are hashed from scratch

# Stands for the list among a call's parts, to cut their canonical text around
# it with the very encoder `codec.digest` uses. Random: no argument holds it.
_MARK = f"stead-list-{uuid.uuid4().hex}"
_MARK_TEXT = codec.canonical(_MARK)


class _Same:
    """A number in a snapshot (or a string, once secrets exist): equal only to
    a value of the same type that encodes to the same text."""

    __slots__ = ("value",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        value = self.value
        if type(other) is not type(value) or other != value:
            return False
        # Equal floats of one type encode alike, except 0.0 and -0.0.
        return type(value) is not float or repr(other) == repr(value)


class _Encoded:
    """Any other value in a snapshot (a dataclass, a datetime, a str or dict
    subclass, a dict with non-string keys...): equal to what encodes to the
    same canonical text. Their own `==` may not say so: datetimes of one
    instant in two time zones are equal, and encode differently."""

    __slots__ = ("text",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        try:
            return codec.canonical(other) == self.text
        except Exception:  # not encodable any more: not the same
            return False


def _freeze(value: Any) -> Any:
    """A copy of `value` (just encoded) such that `current == copy` implies
    that `current` encodes as `value` did.

    Containers are copied, so a change made in place to the caller's value
    is seen. Plain dicts, lists, strings and None compare exactly with `==`,
    in C; strings are shared, so comparing them is mostly comparing pointers.
    Numbers are not exact under `==` (1 == 1.0 == True, 0.0 == -0.0, all
    encoded differently), so each is wrapped in `_Same`, which also checks the
    type: a Python call per number, paid only by lists that hold numbers.
    Anything else (a wait token included) is kept as its canonical text.
    (Values of classes that override `==` to claim equality with plain values
    are beyond this; stead has none.)
    """
    kind = type(value)
    if kind is str:
        return value
    if value is None:
        return None
    if kind is dict and all(type(k) is str for k in value):
        return {k: _freeze(v) for k, v in value.items()}
    if kind is list:
        return [_freeze(v) for v in value]
    if kind is tuple:
        return tuple(_freeze(v) for v in value)
    if kind is int or kind is float or kind is bool:
        return _Same(value)
    return _Encoded(codec.canonical(value))


def _equal(current: Any, frozen: Any) -> bool:
    try:
        return bool(current == frozen)
    except Exception:  # an `==` that raises (a numpy array, say): not the same
        return False


def frozen(values: Sequence[Any]) -> list[Any]:
    """Copies of `values` that `unchanged` compares exactly (see `_freeze`)."""
    return [_freeze(v) for v in values]


def unchanged(current: Sequence[Any], copies: list[Any]) -> bool:
    """Whether `current` encodes as the values `copies` were made of did."""
    return _equal(current, copies)


@dataclasses.dataclass(slots=True)
class _Entry:
    head: str  # the canonical text before the list
    prefix: list[Any]  # frozen copies of the elements hashed into `state`
    # sha256 after `head`, `[` and the elements of `prefix`; None when the list
    # was seen once only, and `prefix` keeps just its first element, to tell
    # the same conversation (worth a snapshot) from another list.
    state: hashlib._Hash | None


class Digests:
    """One run's call digests, remembering per call name the list last hashed."""

    def __init__(self, size: int = SIZE) -> None:
        self._size = size
        self._entries: collections.OrderedDict[Hashable, _Entry] = collections.OrderedDict()

    def llm(self, name: str, model: str, messages: Sequence[Any], params: Mapping[str, Any]
            ) -> str:
        """`codec.digest(model, list(messages), params)`."""
        return self._digest(("llm", name), (model, _MARK, params), list(messages))

    def call(self, kind: str, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        """`codec.digest(list(args), dict(kwargs))`, incremental in the longest
        list argument if it has at least MIN_LENGTH elements."""
        args, kwargs = list(args), dict(kwargs)
        where: int | str | None = None
        longest = MIN_LENGTH - 1
        spots: list[tuple[int | str, Any]] = [*enumerate(args), *kwargs.items()]
        for key, value in spots:
            if type(value) is list and len(value) > longest:
                where, longest = key, len(value)
        if where is None:
            return codec.digest(args, kwargs)
        if isinstance(where, int):
            seq, args[where] = args[where], _MARK
        else:
            seq, kwargs[where] = kwargs[where], _MARK
        return self._digest((kind, name), (args, kwargs), seq)

    def _digest(self, key: Hashable, parts: tuple[Any, ...], seq: list[Any]) -> str:
        """`codec.digest(*parts)` with `seq` in place of the mark."""
        head, tail = codec.canonical(parts).split(_MARK_TEXT)
        old = self._entries.pop(key, None)
        if (old is not None and old.state is not None and old.head == head
                and len(seq) >= len(old.prefix)
                and _equal(seq[:len(old.prefix)], old.prefix)):
            done, prefix, state = len(old.prefix), old.prefix, old.state.copy()
            snapshot = True
        else:
            done, prefix, state = 0, [], hashlib.sha256(f"{head}[".encode())
            # Snapshot only a list that starts as the last one did (the same
            # conversation, edited): a step called on a new batch each time
            # would pay for copies it never uses.
            snapshot = (old is not None and bool(seq) and bool(old.prefix)
                        and _equal(seq[0], old.prefix[0]))
        new = seq[done:]
        text = ",".join(codec.canonical(v) for v in new)  # may raise: the entry is dropped
        state.update(f"{',' if done and new else ''}{text}".encode())
        final = state.copy()
        final.update(f"]{tail}".encode())
        try:
            if snapshot:
                prefix.extend(_freeze(v) for v in new)
                entry = _Entry(head, prefix, state)
            else:
                entry = _Entry(head, [_freeze(v) for v in seq[:1]], None)
        except RecursionError:  # encodable, but too deep to copy here: remember nothing
            pass
        else:
            self._entries[key] = entry
            if len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return final.hexdigest()[: codec.DIGEST_CHARS]


def contracted(digest: str, contract: str | None) -> str:
    """`digest` with the call's contract folded in (`run.step(...,
    contract="v2")`): a call whose contract changed no longer matches its
    record, even with the same name and arguments. Kept readable, as
    `DIGEST#CONTRACT`, so a mismatch can name both contracts."""
    if contract is None:
        return digest
    if (not isinstance(contract, str) or not contract or len(contract) > MAX_CONTRACT_CHARS
            or CONTRACT_MARK in contract or not contract.isprintable()):
        raise ValueError(
            f"a contract is a short printable string without {CONTRACT_MARK!r} (at most "
            f"{MAX_CONTRACT_CHARS} characters), such as 'v2'; not {contract!r}")
    return f"{digest}{CONTRACT_MARK}{contract}"


def contract_of(digest: str) -> tuple[str, str | None]:
    """The argument digest and the contract (None: the call declared none)."""
    base, mark, contract = digest.partition(CONTRACT_MARK)
    return base, (contract if mark else None)
