"""SQL lives in .sql files, in a `sql/` folder beside each dialect's code:
numbered migrations and a `queries.sql` of named blocks (`-- name: claim`).

They are read as the files they are (setuptools installs them as package
data, beside the modules): `importlib.resources` would cost every store's
start-up about 7 ms of imports (`tempfile`, `zipfile`) to find them."""

from __future__ import annotations

import functools
import os
import re

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_DIALECTS = ("sqlite", "postgres")


def _folder(dialect: str) -> str:
    if dialect not in _DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r}")
    return os.path.join(os.path.dirname(__file__), dialect, "sql")


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


@functools.cache
def queries(dialect: str) -> dict[str, str]:
    """Each named block's SQL, comments and all (an empty body: the query
    has nothing to do in this dialect)."""
    parts = _NAME.split(_read(os.path.join(_folder(dialect), "queries.sql")))
    # parts = [preamble, name1, body1, name2, body2, ...]
    names = parts[1::2]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        # A later block would silently replace an earlier one of the same name.
        raise ValueError(f"{dialect} queries.sql names these blocks twice: {', '.join(twice)}")
    return {name: _strip(body) for name, body in zip(names, parts[2::2], strict=True)}


def _strip(body: str) -> str:
    """The body, or "" if it holds nothing but comments."""
    code = [line for line in body.splitlines()
            if line.strip() and not line.lstrip().startswith("--")]
    return body.strip() if code else ""


def migrations(dialect: str) -> list[tuple[int, str]]:
    """`(version, sql)` for every numbered migration, in order."""
    return [(version, sql) for version, _name, sql in migration_files(dialect)]


def migration_files(dialect: str) -> list[tuple[int, str, str]]:
    """`(version, name, sql)` for every numbered migration, in order: the
    name is the file's, after its number (`0026_runs_list.sql`: `runs_list`)."""
    found = []
    folder = _folder(dialect)
    for name in os.listdir(folder):
        head, _, rest = name.partition("_")
        if name.endswith(".sql") and head.isdigit():
            found.append((int(head), rest.removesuffix(".sql"),
                          _read(os.path.join(folder, name))))
    return sorted(found)
