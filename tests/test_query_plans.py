"""A read of one run's rows finds them by the run's index, however many
rows the database holds: a query that also serves "all runs" (`:run_id IS
NULL OR run_id = :run_id`) reads every row on SQLite, and in PostgreSQL's
generic plan (a prepared statement after its first executions) too. The
plans are read with the query text the store runs."""

from __future__ import annotations

import re
import sqlite3
import urllib.parse
from pathlib import Path
from typing import Any

import psycopg
import psycopg.sql
import pytest

import stead
from stead.store import sql_files
from tests import pg

# The reads of one run that the run page, a takeover and a webhook delivery
# make, with the index each must use.
PER_RUN = {"list_run_waits": "waits_run"}


def _params(name: str) -> dict[str, Any]:
    return {"run_id": "r-1", "state": None, "tenant": None, "limit": 1000}


@pytest.mark.parametrize("name", sorted(PER_RUN))
async def test_sqlite_reads_one_run_by_its_index(name: str, tmp_path: Path) -> None:
    store = await stead.open_store(f"sqlite:///{tmp_path}/plans.db")  # the schema
    await store.close()
    with sqlite3.connect(tmp_path / "plans.db") as conn:
        plan = [row[3] for row in conn.execute(
            "EXPLAIN QUERY PLAN " + sql_files.queries("sqlite")[name], _params(name))]
    assert any(PER_RUN[name] in step for step in plan), plan
    assert not any(re.match(r"SCAN w\b", step) for step in plan), plan


def _numbered(sql: str) -> tuple[str, list[str]]:
    """`sql` with psycopg's `%(name)s` placeholders as PREPARE's `$n`."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, sql.strip().rstrip(";")), names


@pytest.mark.parametrize("name", sorted(PER_RUN))
async def test_postgres_reads_one_run_by_its_index_in_a_generic_plan(
        name: str, pg_url: str) -> None:
    store = await stead.open_store(pg_url)  # the schema, migrated
    await store.close()
    schema = urllib.parse.parse_qs(urllib.parse.urlsplit(pg_url).query)["schema"][0]
    sql, names = _numbered(sql_files.queries("postgres")[name])
    params = _params(name)
    with psycopg.connect(pg.URL, autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
        conn.execute("SET plan_cache_mode = force_generic_plan")
        # The simple protocol: through psycopg's, `$n` would be the PREPARE's own.
        done = conn.pgconn.exec_(f"PREPARE read_one AS {sql}".encode())
        assert done.status == psycopg.pq.ExecStatus.COMMAND_OK, done.error_message
        # Literals (EXPLAIN takes no bind parameters), typed: NULL alone has no type.
        values = psycopg.sql.SQL(", ").join(
            psycopg.sql.SQL("{}::bigint" if isinstance(params[n], int) else "{}::text").format(
                psycopg.sql.Literal(params[n])) for n in names)
        plan = [row[0] for row in conn.execute(
            psycopg.sql.SQL("EXPLAIN EXECUTE read_one({})").format(values))]
    text = "\n".join(plan)
    assert PER_RUN[name] in text, text
    assert not re.search(r"Seq Scan on waits\b", text), text
