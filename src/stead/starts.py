"""Batch starts: `Start`, one run to start as `Client.start_many` takes it,
and `Start`s read from JSON lines (`stead start MODULE:APP -`), one object a
line: `{"workflow": "triage", "args": ["T-1"], "task_id": "ticket-T-1",
"queue": "refunds", "priority": 5}`. A line that is not such an object raises
`InvalidStart` naming the line and the field; nothing is started."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stead import errors
from stead.app import Workflow
from stead.intent import Intent

if TYPE_CHECKING:
    import pydantic


@dataclasses.dataclass(frozen=True)
class Start:
    """One run to start: the arguments of `Client.start`. `where` is how an
    error names it (default: its position in the batch)."""

    workflow: Workflow[Any, Any] | str
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    task_id: str | None = None
    version: int | None = None
    queue: str | None = None
    priority: int | None = None
    dedup_key: str | None = None
    intent: Intent | None = None
    deadline: dt.timedelta | float | None = None  # from when it is started
    tenant: str | None = None
    where: str | None = None


@functools.cache
def _line() -> type[pydantic.BaseModel]:
    """A JSON line's shape: strict, so "5" is no priority and a misspelt field
    is refused rather than ignored. Its fields are `Start`'s, but for `where`."""
    # pydantic costs tens of milliseconds to import: only reading lines
    # (`stead start MODULE:APP -`) pays for it, not every process that imports
    # the client.
    import pydantic

    class _Line(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid", strict=True)

        workflow: str = pydantic.Field(min_length=1)
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        task_id: str | None = None
        version: int | None = pydantic.Field(default=None, ge=1)
        queue: str | None = None
        priority: int | None = None
        dedup_key: str | None = None
        intent: dict[str, Any] | None = None
        deadline: float | None = pydantic.Field(default=None, gt=0)  # seconds from the start
        tenant: str | None = None

    return _Line


def from_lines(lines: Iterable[str]) -> list[Start]:
    """The `Start` of each non-blank line; `InvalidStart` at the first bad one."""
    found = []
    for number, text in enumerate(lines, 1):
        if text.strip():
            found.append(from_line(text, f"line {number}"))
    return found


def from_line(text: str, where: str) -> Start:
    import pydantic

    try:
        fields = _line().model_validate_json(text).model_dump()
    except pydantic.ValidationError as exc:
        raise errors.InvalidStart(f"{where}: {_problems(exc)}; nothing was started") from None
    given = fields.pop("intent")
    try:
        intent = None if given is None else Intent.from_json(given)
    except errors.InvalidIntent as exc:
        raise errors.InvalidStart(f"{where}: intent: {exc}; nothing was started") from None
    return Start(**fields, intent=intent, where=where)


def _problems(exc: pydantic.ValidationError) -> str:
    """pydantic's errors on one line: `field: what is wrong`."""
    said = []
    for e in exc.errors(include_url=False, include_input=False):
        field = ".".join(str(part) for part in e["loc"])
        said.append(f"{field}: {e['msg']}" if field else str(e["msg"]))
    return "; ".join(said)
