"""A run's history as one JSON document: `stead runs export RUN > run.json`,
`stead runs import run.json`, and what `stead replay-check --from DIR` and
`stead.testing.check_migration` read.

It holds what replaying the run needs: the run's row (its workflow, version,
input, status), its journal, its waits (token hashes only, never a token)
and its task state; and the conversation its model calls sent (the
messages and parameters their records name, `stead runs show RUN
--conversation`), so an imported run shows it as its own database did.

An export comes from outside, so reading one checks all of it before
anything uses it, and says what is wrong, naming the file: at most
`MAX_BYTES` of UTF-8 JSON; every row has exactly its fields, of their types
(no NUL, no lone surrogate, which no store keeps; ids and names at most
`MAX_NAME_CHARS` long; whole numbers between 0 and 2**63 - 1; finite times;
statuses and kinds stead knows); the journal's
`seq` runs 0, 1, 2... in order; every JSON text field (input, results,
payloads, bound values, schemas, task state, conversation parts) is JSON of
its shape, nested at most `MAX_DEPTH` deep; the waits belong to the run, each
once; each conversation part's name is `PART_NAME` and appears once; and the run's
row agrees with its journal and waits (`stead.agreement`: a run whose journal
still waits is not stored as completed with a result nobody made).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from stead import agreement, errors
from stead.records import Record, RecordKind, RecordStatus, RunRow, StateRow, WaitRow
from stead.records.histories import ConversationPart

FORMAT = "stead.run/1"
# What every sealed payload holds (see `stead.payloads`).
SEALED_MARK = '{\\"$sealed\\": \\"'
# The largest export read: larger is refused before it is read.
MAX_BYTES = 256 * 1024 * 1024
# The deepest nesting of a JSON value inside an export: what the codec writes
# stays well under it, and a value within it is read back without recursion
# trouble anywhere.
MAX_DEPTH = 512
# The longest id or name (every text field that is not JSON): a database
# index holds it whole, and PostgreSQL's refuses an entry past ~2.7 KB.
MAX_NAME_CHARS = 512
_INT_RANGE = (0, 2**63 - 1)
# Fields whose whole numbers may be negative, and those that start at 1.
_SIGNED = frozenset({"priority"})
_FROM_ONE = frozenset({"version"})
# The fields of each row that hold JSON text, and the JSON type each must be
# (None: any JSON).
_JSON_FIELDS: dict[type, dict[str, type | None]] = {
    RunRow: {"input": dict, "result": None, "error": None, "in_flight": None},
    Record: {"payload": None, "arguments": dict},
    WaitRow: {"bind": dict, "schema": dict, "request": None},
    StateRow: {"data": None},
    ConversationPart: {"body": None},
}
# What a conversation part's name (and parent) is: 32 hex characters of a sha256.
PART_NAME = re.compile(r"[0-9a-f]{32}")
_R = TypeVar("_R")
_TOP = frozenset({"format", "run", "journal", "waits", "state", "conversation"})


@dataclasses.dataclass(frozen=True)
class StoredRun:
    """A run as stored: its row, its journal in commit order, its waits, its
    task state (None if the task has none) and the parts of the conversation
    its model calls sent."""

    run: RunRow
    journal: tuple[Record, ...]
    waits: tuple[WaitRow, ...] = ()
    state: StateRow | None = None
    conversation: tuple[ConversationPart, ...] = ()

    @property
    def code(self) -> str:
        return f"{self.run.workflow}@{self.run.version}"

    def to_json(self) -> dict[str, Any]:
        # A run with no conversation kept leaves the field out, as files
        # written before it have it.
        conversation = {"conversation": [dataclasses.asdict(p) for p in self.conversation]
                        } if self.conversation else {}
        return {
            **conversation,
            "format": FORMAT,
            "run": dataclasses.asdict(self.run),
            # A record without a step's arguments leaves the field out, as
            # files written before it have it.
            "journal": [{k: v for k, v in dataclasses.asdict(r).items()
                         if k != "arguments" or v is not None} for r in self.journal],
            "waits": [dataclasses.asdict(w) for w in self.waits],
            "state": None if self.state is None else dataclasses.asdict(self.state),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True)

    def checked(self) -> StoredRun:
        """This run, checked as an export read from a file is: `InvalidInput`
        saying what is wrong (a run built in code passes the same door)."""
        return StoredRun.from_json(json.loads(json.dumps(self.to_json())),
                                   source=f"run {self.run.run_id!r}")

    @classmethod
    def from_json(cls, data: Any, *, source: str = "the export") -> StoredRun:
        """Read an export; `InvalidInput` naming `source` if it is not one."""
        try:
            if not isinstance(data, Mapping) or data.get("format") != FORMAT:
                raise ValueError(f"it is not a stead run export (format {FORMAT!r})")
            extra = sorted(set(data) - _TOP)
            if extra:
                raise ValueError(f"it has unknown fields {extra}")
            _within_depth(data, "it")
            run = _row(RunRow, _required(data, "run"), "the run")
            journal = tuple(_row(Record, r, f"journal record {i}")
                            for i, r in enumerate(_list(data, "journal")))
            waits = tuple(_row(WaitRow, w, f"wait {i}")
                          for i, w in enumerate(_list(data, "waits", optional=True)))
            state = None if data.get("state") is None else _row(StateRow, data["state"],
                                                                 "the task state")
            conversation = tuple(
                _row(ConversationPart, p, f"conversation part {i}")
                for i, p in enumerate(_list(data, "conversation", optional=True)))
            _consistent(run, journal, waits, state)
            _parts_consistent(conversation)
        except (KeyError, TypeError, ValueError) as exc:
            raise errors.InvalidInput(f"{source}: {exc}") from exc
        return cls(run, journal, waits, state, conversation)

    @classmethod
    def loads(cls, text: str, *, source: str = "the export") -> StoredRun:
        return cls.from_json(_parse(text, source), source=source)

    @classmethod
    def read(cls, path: str | Path) -> StoredRun:
        """Read the export in the file at `path`: `InvalidInput` naming the
        file if it cannot be read, is too large, is not UTF-8 or not one, or is
        sealed (exported with encryption on: `stead runs import` opens it)."""
        text = read_text(path)
        if SEALED_MARK in text:
            raise errors.InvalidInput(
                f"{path}: its payloads are sealed (exported with encryption on); import it "
                "with STEAD_ENCRYPT=1 and the key file of its database: stead runs import")
        return cls.loads(text, source=str(path))


def read_json(path: str | Path) -> Any:
    """The JSON in the export file at `path`, not checked yet as an export."""
    return _parse(read_text(path), str(path))


def read_text(path: str | Path) -> str:
    """The UTF-8 text of an export file, at most `MAX_BYTES` of it read."""
    try:
        with open(path, "rb") as f:
            # A file's size says it before a byte is read; a pipe's read says it.
            too_large = os.fstat(f.fileno()).st_size > MAX_BYTES
            data = b"" if too_large else f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise errors.InvalidInput(f"{path}: cannot be read ({exc.strerror})") from exc
    if too_large or len(data) > MAX_BYTES:
        raise errors.InvalidInput(
            f"{path}: larger than {MAX_BYTES // 2**20} MB, the most an export may be")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise errors.InvalidInput(
            f"{path}: it is not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x})"
        ) from exc


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _parse(text: str, source: str) -> Any:
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError as exc:
        raise errors.InvalidInput(f"{source}: it is nested too deeply to be an "
                                  "export") from exc
    except ValueError as exc:
        raise errors.InvalidInput(f"{source} is not JSON: {exc}") from exc


def _required(data: Mapping[str, Any], name: str) -> Any:
    if name not in data:
        raise ValueError(f"it has no {name!r}")
    return data[name]


def _list(data: Mapping[str, Any], name: str, *, optional: bool = False) -> list[Any]:
    value = data.get(name, []) if optional else _required(data, name)
    if not isinstance(value, list):
        raise ValueError(f"its {name!r} is {_type(value)}, not a list")
    return value


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _row(cls: type[_R], data: Any, what: str) -> _R:
    """`cls` built from `data` once every field is checked."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} is {_type(data)}, not an object")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    extra = sorted(set(data) - set(fields))
    if extra:
        raise ValueError(f"{what} has unknown fields {extra}")
    missing = [name for name, f in fields.items() if name not in data
               and f.default is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{what} lacks {missing}")
    hints, texts = _hints(cls), _JSON_FIELDS[cls]
    for name, value in data.items():
        where = f"{what}'s {name}"
        _field(name, value, hints[name], where)
        if name in texts and value is not None:
            _json_text(value, texts[name], where)
        elif isinstance(value, str) and len(value) > MAX_NAME_CHARS:
            raise ValueError(f"{where} is {len(value)} characters long; at most "
                             f"{MAX_NAME_CHARS} are accepted")
    return cls(**data)


def _field(name: str, value: Any, hint: Any, where: str) -> None:
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None:
        if type(None) not in options:
            raise ValueError(f"{where} is null")
        return
    [kind] = [t for t in options if t is not type(None)]
    if isinstance(kind, type) and issubclass(kind, enum.StrEnum):
        if not isinstance(value, str) or value not in kind._value2member_map_:
            raise ValueError(f"{where} is {_shown(value)}, not one of "
                             f"{sorted(kind._value2member_map_)}")
    elif kind is int:
        low, high = _INT_RANGE
        low = -high - 1 if name in _SIGNED else 1 if name in _FROM_ONE else low
        if type(value) is not int or not low <= value <= high:
            raise ValueError(f"{where} is {_shown(value)}, not a whole number from {low} "
                             f"to {high}")
    elif kind is float:
        if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{where} is {_shown(value)}, not a time (seconds >= 0)")
    elif kind is str:
        if not isinstance(value, str):
            raise ValueError(f"{where} is {_type(value)}, not a string")
        _text(value, where)
    else:
        raise TypeError(f"{where}: no check for {hint!r}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _text(value: str, where: str) -> None:
    if "\x00" in value:
        raise ValueError(f"{where} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{where} contains a lone surrogate (character {exc.start})"
                         ) from None


def _json_text(text: str, shape: type | None, where: str) -> None:
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError(f"{where} is nested deeper than {MAX_DEPTH}") from None
    except ValueError as exc:
        raise ValueError(f"{where} is not JSON ({exc})") from None
    if shape is not None and not isinstance(value, shape):
        raise ValueError(f"{where} is JSON {_type(value)}, not an object")
    _within_depth(value, where)


def _within_depth(value: Any, where: str) -> None:
    """Refuse `value` nested deeper than `MAX_DEPTH` (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"{where} is nested deeper than {MAX_DEPTH}")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def _consistent(run: RunRow, journal: tuple[Record, ...], waits: tuple[WaitRow, ...],
                state: StateRow | None) -> None:
    """What holds between the rows: the input's arguments, seq 0, 1, 2... in
    order, an error's payload an object, the waits the run's own and each
    once, and the run's status, result and error agreeing with its journal
    and waits (`stead.agreement`)."""
    arguments = json.loads(run.input)
    if not isinstance(arguments.get("args"), list) or not isinstance(
            arguments.get("kwargs"), dict):
        raise ValueError("the run's input is not {\"args\": [...], \"kwargs\": {...}}")
    for i, r in enumerate(journal):
        if r.seq != i:
            raise ValueError(f"journal record {i} has seq {r.seq}: the journal's seq must "
                             f"run 0, 1, 2... in order (expected {i})")
        payload = json.loads(r.payload)
        if r.status == RecordStatus.ERROR and not isinstance(payload, dict):
            raise ValueError(f"journal record {i} is an error whose payload is not an "
                             "object")
        if r.kind == RecordKind.CUT and not (
                isinstance(payload, dict) and type(payload.get("from_seq")) is int
                and 0 <= payload["from_seq"] <= r.seq):
            raise ValueError(f"journal record {i} is a cut whose payload does not say "
                             "where it starts (from_seq, a seq before it)")
    seen: set[str] = set()
    for i, w in enumerate(waits):
        if w.run_id != run.run_id:
            raise ValueError(f"wait {i} belongs to run {w.run_id!r}, not {run.run_id!r}")
        if w.wait_id in seen:
            raise ValueError(f"wait {i} repeats wait id {w.wait_id!r}")
        seen.add(w.wait_id)
    problem = agreement.disagreement(run, journal, waits, state)
    if problem is not None:
        raise ValueError(f"{problem}. A run's row must agree with its journal and waits: "
                         "export the run again from its database (stead runs export RUN)")


def _parts_consistent(parts: tuple[ConversationPart, ...]) -> None:
    """Each part named as stead names one (and its parent too), each name once."""
    seen: set[str] = set()
    for i, p in enumerate(parts):
        for what, name in (("name", p.name), ("parent", p.parent)):
            if name is not None and PART_NAME.fullmatch(name) is None:
                raise ValueError(f"conversation part {i}'s {what} is {_shown(name)}, not 32 "
                                 "hex characters")
        if p.name in seen:
            raise ValueError(f"conversation part {i} repeats name {p.name!r}")
        seen.add(p.name)
