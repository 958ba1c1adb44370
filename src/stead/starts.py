"""Batch starts: `Start`, one run to start as `Client.start_many` takes it,
and `Start`s read from JSON lines (`stead start MODULE:APP -`), one object a
line: `{"workflow": "triage", "args": ["T-1"], "task_id": "ticket-T-1",
"queue": "refunds", "priority": 5}`. A line that is not such an object raises
`InvalidStart` naming the line and the field; nothing is started."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pydantic

from stead import errors
from stead.app import Workflow
from stead.intent import Intent


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
    where: str | None = None


class _Line(pydantic.BaseModel):
    """A JSON line's shape: strict, so "5" is no priority and a misspelt field
    is refused rather than ignored."""

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


def from_lines(lines: Iterable[str]) -> list[Start]:
    """The `Start` of each non-blank line; `InvalidStart` at the first bad one."""
    found = []
    for number, text in enumerate(lines, 1):
        if text.strip():
            found.append(from_line(text, f"line {number}"))
    return found


def from_line(text: str, where: str) -> Start:
    try:
        line = _Line.model_validate_json(text)
    except pydantic.ValidationError as exc:
        raise errors.InvalidStart(f"{where}: {_problems(exc)}; nothing was started") from None
    try:
        intent = None if line.intent is None else Intent.from_json(line.intent)
    except errors.InvalidIntent as exc:
        raise errors.InvalidStart(f"{where}: intent: {exc}; nothing was started") from None
    return Start(line.workflow, line.args, line.kwargs, task_id=line.task_id,
                 version=line.version, queue=line.queue, priority=line.priority,
                 dedup_key=line.dedup_key, intent=intent, deadline=line.deadline,
                 where=where)


def _problems(exc: pydantic.ValidationError) -> str:
    """pydantic's errors on one line: `field: what is wrong`."""
    said = []
    for e in exc.errors(include_url=False, include_input=False):
        field = ".".join(str(part) for part in e["loc"])
        said.append(f"{field}: {e['msg']}" if field else str(e["msg"]))
    return "; ".join(said)
