"""Event payloads checked against a wait's JSON Schema, with `jsonschema`.

The delivering client may not have the workflow's code, so a wait stores its
payload schema as JSON Schema (pydantic generates it, in draft 2020-12) and
deliveries are checked against that: what a user's own tooling accepts for
that schema, stead accepts.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from stead import errors

if TYPE_CHECKING:
    import jsonschema.protocols

# Problems named in a rejection, and characters kept of each.
MAX_PROBLEMS = 3
PROBLEM_CHARS = 160


@functools.lru_cache(maxsize=256)
def _validator(schema_text: str) -> jsonschema.protocols.Validator:
    # jsonschema costs tens of milliseconds to import (it brings attrs and
    # referencing): only a process that checks a wait's schema pays for it.
    import jsonschema

    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    validator: jsonschema.protocols.Validator = cls(schema)
    return validator


def check(schema_text: str) -> None:
    """Raise `SteadError` if `schema_text` is not a valid JSON Schema."""
    from jsonschema.exceptions import SchemaError

    try:
        _validator(schema_text)
    except SchemaError as exc:
        raise errors.SteadError(
            f"the wait's schema is not a valid JSON Schema: {_one_line(exc.message)}"
        ) from exc


def problems(value: Any, schema_text: str) -> list[str]:
    """How `value` fails the JSON Schema `schema_text`, a few problems in one
    line each (empty when it fits): where (`$.amount`) and what."""
    from jsonschema.exceptions import SchemaError

    try:
        validator = _validator(schema_text)
    except SchemaError as exc:
        return [f"the wait's schema is invalid: {_one_line(exc.message)}"]
    found = sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{e.json_path}: {_one_line(e.message)}" for e in found[:MAX_PROBLEMS]]


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PROBLEM_CHARS else text[: PROBLEM_CHARS - 1] + "…"
