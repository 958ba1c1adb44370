"""A small JSON Schema validator for event payloads.

The delivering client may not have the workflow's code, so a wait stores its
payload schema as JSON Schema (pydantic generates it) and deliveries are
checked against that. This covers what pydantic emits for plain models:
types, properties, required, additionalProperties, items, enum/const,
anyOf/oneOf/allOf, local $refs, and numeric/length bounds.
"""

from __future__ import annotations

import re
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "null": (type(None),), "number": (int, float), "integer": (int,),
}


def _is(value: Any, name: str) -> bool:
    if name in ("number", "integer") and isinstance(value, bool):
        return False  # JSON true is not the number 1
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(name, ()))


def errors(value: Any, schema: dict[str, Any], root: dict[str, Any] | None = None,
           path: str = "$") -> list[str]:
    """Every way `value` fails `schema` (empty when it fits)."""
    root = root if root is not None else schema
    if "$ref" in schema:
        ref = str(schema["$ref"])
        if not ref.startswith("#/"):
            return [f"{path}: unsupported $ref {ref}"]
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return errors(value, target, root, path)
    found: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_is(value, k) for k in kinds):
            return [f"{path}: expected {' or '.join(kinds)}, got {type(value).__name__}"]
    if "const" in schema and value != schema["const"]:
        found.append(f"{path}: must be {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{path}: must be one of {schema['enum']!r}")
    for key in ("anyOf", "oneOf"):
        if key in schema:
            matches = sum(not errors(value, s, root, path) for s in schema[key])
            if matches == 0 or (key == "oneOf" and matches > 1):
                found.append(f"{path}: matches {matches} of the {key} alternatives")
    for sub in schema.get("allOf", ()):
        found += errors(value, sub, root, path)
    if isinstance(value, dict):
        found += _object(value, schema, root, path)
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                found += errors(item, items, root, f"{path}[{i}]")
        found += _bounds(len(value), schema, "minItems", "maxItems", path, "items")
    if isinstance(value, str):
        found += _bounds(len(value), schema, "minLength", "maxLength", path, "characters")
        if "pattern" in schema and not re.search(str(schema["pattern"]), value):
            found.append(f"{path}: does not match {schema['pattern']!r}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        found += _numeric(value, schema, path)
    return found


def _object(value: dict[str, Any], schema: dict[str, Any], root: dict[str, Any],
            path: str) -> list[str]:
    found = [f"{path}: missing {k!r}" for k in schema.get("required", ()) if k not in value]
    props: dict[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in props:
            found += errors(item, props[key], root, f"{path}.{key}")
        elif extra is False:
            found.append(f"{path}: unexpected {key!r}")
        elif isinstance(extra, dict):
            found += errors(item, extra, root, f"{path}.{key}")
    return found


def _bounds(n: int, schema: dict[str, Any], low: str, high: str, path: str,
            unit: str) -> list[str]:
    found = []
    if low in schema and n < schema[low]:
        found.append(f"{path}: fewer than {schema[low]} {unit}")
    if high in schema and n > schema[high]:
        found.append(f"{path}: more than {schema[high]} {unit}")
    return found


def _numeric(value: float, schema: dict[str, Any], path: str) -> list[str]:
    found = []
    if "minimum" in schema and value < schema["minimum"]:
        found.append(f"{path}: below {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        found.append(f"{path}: above {schema['maximum']}")
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        found.append(f"{path}: not above {schema['exclusiveMinimum']}")
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        found.append(f"{path}: not below {schema['exclusiveMaximum']}")
    return found
