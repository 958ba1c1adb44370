"""`Limits`: a tenant's spend budget and quotas; `Price`: a model's token prices."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from stead import bounds, errors

# The quotas a tenant may be given, with what each counts.
QUOTAS = {
    "runs_per_minute": "runs started (children and scheduled runs included) in the last 60 s",
    "open_waits": "waits open at once, over all its runs",
    "children_per_run": "children one run may start",
    "stored_bytes": "bytes of journal, inputs and stream values its runs hold",
}
_BUDGETS = ("tokens", "cost")
FIELDS = (*_BUDGETS, *QUOTAS)


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """What one tenant may consume and create (None: no limit).

    `tokens` and `cost` bound the spend of all its runs' model calls together
    (settled and reserved); `cost` is in the unit of the price table. The
    quotas are in `QUOTAS`."""

    tokens: int | None = None
    cost: float | None = None
    runs_per_minute: int | None = None
    open_waits: int | None = None
    children_per_run: int | None = None
    stored_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            if name == "cost":
                bounds.amount(value, "a tenant's cost budget")
            else:
                bounds.integer(value, f"a tenant's {name.replace('_', ' ')}")

    def to_json(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in FIELDS if getattr(self, n) is not None}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    def merged(self, changes: Mapping[str, Any]) -> Limits:
        """These limits with `changes` applied: a name set to None is lifted."""
        unknown = sorted(set(changes) - set(FIELDS))
        if unknown:
            raise errors.InvalidValue(
                f"unknown tenant limit(s) {', '.join(unknown)}; the limits are "
                f"{', '.join(FIELDS)}")
        return Limits(**{**self.to_json(), **changes})

    @classmethod
    def from_json(cls, data: Any) -> Limits:
        if not isinstance(data, Mapping):
            raise errors.InvalidValue(f"a tenant's limits are a JSON object, not {data!r}")
        return cls().merged({k: data[k] for k in data})

    @classmethod
    def loads(cls, text: str) -> Limits:
        return cls.from_json(json.loads(text))


@dataclasses.dataclass(frozen=True, slots=True)
class Price:
    """What a model's tokens cost: per million input tokens and per million
    output tokens, in the platform's unit (dollars, credits...)."""

    input: float
    output: float

    def __post_init__(self) -> None:
        bounds.amount(self.input, "a model's price per million input tokens")
        bounds.amount(self.output, "a model's price per million output tokens")
