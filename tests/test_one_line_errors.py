"""Bad arguments and URLs end as one line that says what to write instead."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import stead
from stead import codec
from stead.cli import main
from stead.store.postgres.connection import parse_url
from stead.store.sqlite.connection import path_from_url
from tests.ops_app import cli


def _one_line_error(result: Result, code: int = 1) -> str:
    assert result.exit_code == code, (result.output, result.exception)
    assert "Traceback" not in result.output and "https://" not in result.output
    [line] = [x for x in result.output.splitlines() if x.startswith("Error:")]
    return line


def test_deeply_nested_json_arguments_are_one_line_errors(app_spec: str,
                                                          sqlite_url: str) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    line = _one_line_error(cli(sqlite_url, "start", app_spec, "hello", deep))
    assert "nested too deeply" in line
    with pytest.raises(stead.SerializationError, match="nested too deeply"):
        codec.loads(deep)
    nested: Any = []
    for _ in range(100_000):
        nested = [nested]
    with pytest.raises(stead.SerializationError, match="nested too deeply"):
        codec.dumps(nested, what="the input")


def test_a_path_like_module_says_what_to_write(app_spec: str, sqlite_url: str) -> None:
    module = app_spec.split(":")[0]
    line = _one_line_error(cli(sqlite_url, "start", f"./{module}.py:app", "hello"))
    assert "names a file" in line and f"e.g. {module}:app" in line
    line = _one_line_error(cli(sqlite_url, "start", f"pkg/{module}.py:app", "hello"))
    assert f"e.g. pkg.{module}:app" in line
    line = _one_line_error(cli(sqlite_url, "start", ".rel:app", "hello"))
    assert "is not a module name" in line


def test_a_type_mismatch_is_one_line_without_a_url(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   sqlite_url: str) -> None:
    name = f"typedapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "import stead\napp = stead.App('t')\n\n"
        "@app.workflow()\nasync def pay(run, amount: int, note: str):\n    return amount\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    line = _one_line_error(cli(sqlite_url, "start", f"{name}:app", "pay", '["ten", 5]'))
    assert line == ("Error: these arguments do not fit workflow pay@1: amount: Input should be "
                    "a valid integer, unable to parse string as an integer (got 'ten')")


def test_urls_that_cannot_be_meant_are_refused(sqlite_url: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for schema in ("pg_catalog", "information_schema", "pg_toast", "PG_temp_3"):
        with pytest.raises(stead.StoreError, match="is a PostgreSQL system schema"):
            parse_url(f"postgresql://u@h/db?schema={schema}")
    with pytest.raises(stead.StoreError, match=r"names a host \('host'\)"):
        path_from_url("sqlite://host/x.db")
    assert path_from_url("sqlite:///x.db") == "x.db"

    line = _one_line_error(cli("", "runs", "ls"))
    assert "the database URL is empty" in line
    monkeypatch.setenv("STEAD_DATABASE_URL", "")
    line = _one_line_error(CliRunner().invoke(main, ["runs", "ls"]))
    assert "unset STEAD_DATABASE_URL" in line
    with pytest.raises(stead.StoreError, match="STEAD_DATABASE_URL is empty"):
        asyncio.run(stead.open_store())
    with pytest.raises(stead.StoreError, match="the database URL is empty"):
        asyncio.run(stead.open_store(""))
    line = _one_line_error(cli("sqlite://host/x.db", "runs", "ls"))
    assert "names a host" in line
