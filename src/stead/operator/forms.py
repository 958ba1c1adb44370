"""An action's form: its fields, the decision an operator types into them
(`Decision`), and how a field's text is read."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Any

from stead import bounds, errors
from stead.client.deciding import MISSING


class FieldKind(enum.StrEnum):
    """How a field's text is read."""

    TEXT = "text"
    JSON = "json"  # any JSON value
    SECONDS = "seconds"  # a positive number of seconds
    CHOICE = "choice"  # one of `Field.choices`


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    label: str
    kind: FieldKind = FieldKind.TEXT
    required: bool = False
    choices: tuple[str, ...] = ()
    hint: str = ""


@dataclasses.dataclass(frozen=True)
class Decision:
    """One operator's decision: the action's `target` (a wait id, an effect
    key, a tool; "" for the run), its field `values` as typed, who and why."""

    run_id: str
    target: str
    values: Mapping[str, str]
    by: str
    why: str



def read_json(decision: Decision, name: str, default: Any = MISSING) -> Any:
    text = decision.values.get(name, "").strip()
    if not text:
        if default is MISSING:
            raise errors.InvalidInput(f"{name}: give a JSON value")
        return default
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise errors.InvalidInput(f"{name} is not valid JSON: {exc}") from None


def read_seconds(decision: Decision, name: str) -> float | None:
    text = decision.values.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise errors.InvalidInput(f"{name}: {text[:40]!r} is not a number of seconds") from None
    return bounds.seconds(value, name)


def read_object(decision: Decision, name: str) -> dict[str, Any] | None:
    value = read_json(decision, name, None)
    if value is not None and not isinstance(value, dict):
        raise errors.InvalidInput(f"{name} must be a JSON object")
    return value
