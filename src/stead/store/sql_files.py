"""SQL lives in .sql files, one folder per dialect: numbered migrations and a
`queries.sql` of named blocks (`-- name: claim`)."""

from __future__ import annotations

import functools
import re
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@functools.cache
def queries(dialect: str) -> dict[str, str]:
    text = (resources.files("stead.store") / "sql" / dialect / "queries.sql").read_text()
    parts = _NAME.split(text)
    # parts = [preamble, name1, body1, name2, body2, ...]
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def migrations(dialect: str) -> list[tuple[int, str]]:
    """`(version, sql)` for every numbered migration, in order."""
    folder = resources.files("stead.store") / "sql" / dialect
    found = []
    for entry in folder.iterdir():
        head = entry.name.split("_", 1)[0]
        if entry.name.endswith(".sql") and head.isdigit():
            found.append((int(head), entry.read_text()))
    return sorted(found)
