"""Reads that name what they look for (one run's waits, the runs of one
status) find it by index, however many rows the database holds: a query
that also serves "everything" (`:run_id IS NULL OR run_id = :run_id`) reads
every row on SQLite, and in PostgreSQL's generic plan (a prepared statement
after its first executions) too. On PostgreSQL, a read of one run's journal
or events opens that run's day partition alone, however many days are kept.
The plans are read with the query text the store runs."""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
import time
import urllib.parse
from pathlib import Path

import psycopg
import psycopg.sql
import pytest

import stead
from stead import run_ids
from stead.records import NewRun
from stead.store import sql_files
from tests import pg

_SEARCH = {"workflow": None, "version": None, "task_id": None, "queue": None, "tenant": None,
           "since": None, "until": None, "prefix": None, "shown": None, "pattern": None,
           "before_at": None, "before_id": None, "limit": 50}
# Query: its parameters, the index it must use, and the table it must not scan.
NAMED = {
    "list_run_waits": ({"run_id": "r-1", "state": None, "tenant": None, "limit": 1000},
                       "waits_run", "waits"),
    "list_runs_of_status": ({"status": "failed", "tenant": None, "workflow": None,
                             "limit": 50}, "runs_status", "runs"),
    "search_runs_of_status": ({**_SEARCH, "status": "failed"}, "runs_status", "runs"),
}
# A prune's batch, checked again under its write lock: found by the runs' key.
_PRUNED = {"cutoff": 1e12, "limit": 100}
SQLITE_NAMED = {**NAMED, "prunable_runs_of": (
    {**_PRUNED, "run_ids": '["r-1", "r-2"]'}, "sqlite_autoindex_runs_1", "runs")}
POSTGRES_NAMED = {**NAMED, "prunable_runs_of": (
    {**_PRUNED, "run_ids": ["r-1", "r-2"], "id_min": "r-1", "id_max": "r-2"}, "runs_pkey",
    "runs")}


@pytest.mark.parametrize("name", sorted(SQLITE_NAMED))
async def test_sqlite_finds_what_a_read_names_by_index(name: str, tmp_path: Path) -> None:
    store = await stead.open_store(f"sqlite:///{tmp_path}/plans.db")  # the schema
    # Some runs, and the statistics a seeded database has: with none, the
    # planner guesses, and may guess right for the wrong query.
    await store.create_runs([NewRun(f"r-{i}", "wf", 1, None, "{}") for i in range(300)])
    await store.close()
    with sqlite3.connect(tmp_path / "plans.db") as conn:
        conn.execute("UPDATE runs SET status = 'completed' WHERE rowid % 10 > 0")  # as seeded
        conn.execute("ANALYZE")
        plan = [row[3] for row in conn.execute(
            "EXPLAIN QUERY PLAN " + sql_files.queries("sqlite")[name], SQLITE_NAMED[name][0])]
    _, index, table = SQLITE_NAMED[name]
    alias = "w" if table == "waits" else table  # as the query names it
    assert any(re.match(rf"SEARCH {alias} USING (COVERING )?INDEX {index}\b", step)
               for step in plan), plan
    assert not any(re.match(rf"SCAN {alias}\b", step) for step in plan), plan


def _numbered(sql: str) -> tuple[str, list[str]]:
    """`sql` with psycopg's `%(name)s` placeholders as PREPARE's `$n`."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, sql.strip().rstrip(";")), names


@pytest.mark.parametrize("name", sorted(POSTGRES_NAMED))
async def test_postgres_finds_what_a_read_names_by_index_in_a_generic_plan(
        name: str, pg_url: str) -> None:
    store = await stead.open_store(pg_url)  # the schema, migrated
    await store.close()
    schema = urllib.parse.parse_qs(urllib.parse.urlsplit(pg_url).query)["schema"][0]
    sql, names = _numbered(sql_files.queries("postgres")[name])
    params, index, table = POSTGRES_NAMED[name]
    with psycopg.connect(pg.URL, autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
        conn.execute("SET plan_cache_mode = force_generic_plan")
        # The simple protocol: through psycopg's, `$n` would be the PREPARE's own.
        done = conn.pgconn.exec_(f"PREPARE read_one AS {sql}".encode())
        assert done.status == psycopg.pq.ExecStatus.COMMAND_OK, done.error_message
        # Literals: EXPLAIN takes no bind parameters (the PREPARE's casts type them).
        values = psycopg.sql.SQL(", ").join(psycopg.sql.Literal(params[n]) for n in names)
        plan = [row[0] for row in conn.execute(
            psycopg.sql.SQL("EXPLAIN EXECUTE read_one({})").format(values))]
    text = "\n".join(plan)
    assert index in text, text
    # The table itself, not a subquery's alias of it (`runs p`: a parent's check).
    assert not re.search(rf"Seq Scan on {table}\s+\(", text), text


def _code(sql: str) -> str:
    """SQL without its comment lines, its whitespace collapsed."""
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    return " ".join(" ".join(lines).split())


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
@pytest.mark.parametrize("base", ["list_runs", "search_runs"])
def test_a_read_of_one_status_is_its_base_read_with_the_status_required(
        dialect: str, base: str) -> None:
    """`<base>_of_status` repeats `<base>` but for its status filter (and, on
    SQLite, the index it names): the two must not drift apart."""
    q = sql_files.queries(dialect)
    either, required = {
        "sqlite": ("(:status IS NULL OR runs.status = :status)", "runs.status = :status"),
        "postgres": ("(%(status)s::text IS NULL OR runs.status = %(status)s::text)",
                     "runs.status = %(status)s::text"),
    }[dialect]
    expected = _code(q[base]).replace(either, required)
    if dialect == "sqlite":
        expected = expected.replace("FROM runs LEFT JOIN", "FROM runs INDEXED BY runs_status "
                                    "LEFT JOIN", 1)
    assert either in _code(q[base])
    assert _code(q[f"{base}_of_status"]) == expected


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_a_prune_s_check_of_its_runs_is_the_prunable_read_with_the_ids_required(
        dialect: str) -> None:
    """`prunable_runs_of` repeats `prunable_runs` but for its run ids filter
    (on PostgreSQL, required of the journal's rows too: the day partitions
    are pruned by it)."""
    q = sql_files.queries(dialect)
    either, required = {
        "sqlite": ("(:run_ids IS NULL OR run_id IN (SELECT value FROM json_each(:run_ids)))",
                   "run_id IN (SELECT value FROM json_each(:run_ids))"),
        "postgres": ("(%(run_ids)s::text[] IS NULL OR run_id = ANY(%(run_ids)s::text[]))",
                     "run_id = ANY(%(run_ids)s::text[])"),
    }[dialect]
    assert either in _code(q["prunable_runs"])
    expected = _code(q["prunable_runs"]).replace(either, required)
    if dialect == "postgres":
        for alias, by in (("j", "runs.run_id"), ("k", "j.run_id")):
            was = f"{alias}.run_id = {by} AND"
            assert was in expected
            expected = expected.replace(
                was, f"{alias}.run_id = {by} AND {alias}.run_id BETWEEN %(id_min)s AND "
                "%(id_max)s AND")
    assert _code(q["prunable_runs_of"]) == expected


# Reads of one run's journal or events, with their parameters (`RUN`: the run).
RUN = "run"
ONE_RUN = {
    "load_journal": {}, "next_seq": {}, "journal_size": {}, "journal_summaries": {},
    "journal_model_calls": {}, "journal_page": {"start": 0, "limit": 50},
    "find_record": {"addr": "a", "attempt": 1, "status": "ok"},
    "count_records": {"seqs": [1], "addrs": ["a"], "attempts": [1], "statuses": ["ok"]},
    "get_event": {"event_id": "e-1"}, "list_events": {"limit": 50},
    "run_waits_and_event": {"event_id": "e-1"}, "run_wait_and_event": {"wait_id": "w-1"},
    "prunable_runs_of": {"cutoff": 1e12, "limit": 100},
}
DAYS_KEPT = 40


async def test_postgres_reads_one_day_of_the_journal_for_one_run(pg_url: str) -> None:
    """Each read of one run's records opens that run's day partition alone,
    with `DAYS_KEPT` days kept: the plan a prepared statement is made with at
    its first executions, and kept while a generic plan (every partition,
    pruned as it starts) looks dearer to the planner, which it does."""
    store = await stead.open_store(pg_url)  # the schema, migrated
    await store.close()
    schema = urllib.parse.parse_qs(urllib.parse.urlsplit(pg_url).query)["schema"][0]
    today = dt.datetime.now(dt.UTC).date()
    run_id = run_ids.new(time.time())
    q = sql_files.queries("postgres")
    with psycopg.connect(pg.URL, autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
        for back in range(DAYS_KEPT + 1):
            conn.execute("SELECT stead_add_day(%s)", (today - dt.timedelta(days=back),))
        for name, params in ONE_RUN.items():
            plan = "\n".join(row[0] for row in conn.execute(
                "EXPLAIN " + q[name], {**params, "run_id": run_id, "run_ids": [run_id],
                                       "id_min": run_id, "id_max": run_id}))
            days = set(re.findall(r"\b(?:journal|events)_d\d{8}\b", plan))
            assert len(days) == 1, (name, plan)


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_a_run_s_wait_read_is_the_wait_read_with_the_run_named(dialect: str) -> None:
    """`run_wait_and_event` repeats `wait_and_event` but for the run it names."""
    q = sql_files.queries(dialect)
    run, wait = {"sqlite": (":run_id", ":wait_id"),
                 "postgres": ("%(run_id)s", "%(wait_id)s")}[dialect]
    expected = _code(q["wait_and_event"]).replace(
        "ON e.run_id = w.run_id", f"ON e.run_id = {run}").replace(
        f"WHERE w.wait_id = {wait}", f"WHERE w.wait_id = {wait} AND w.run_id = {run}")
    assert expected != _code(q["wait_and_event"])
    assert _code(q["run_wait_and_event"]) == expected


def test_a_claim_of_several_tenants_reads_each_as_the_claim_of_one() -> None:
    """`claim_tenants` (PostgreSQL) repeats `claim_tenant`'s read of one
    tenant's runnable and due runs, and its lease, for each tenant of its
    plan: the two must not drift apart."""
    q = sql_files.queries("postgres")
    one, several = _code(q["claim_tenant"]), _code(q["claim_tenants"])
    reads = re.findall(r"SELECT rt\.run_id, rt\.created_at FROM run_tenants AS rt .*? "
                       r"FOR UPDATE OF r SKIP LOCKED", one)
    assert len(reads) == 2  # the runnable, the due
    for read in reads:
        each = read.replace("%(tenant)s", "plan.tenant").replace("%(limit)s", "plan.most")
        assert each in several, read
    lease = one[one.index("UPDATE runs SET"):one.index("FROM picked")]
    assert lease in several
    assert sql_files.queries("sqlite")["claim_tenants"] == ""  # tenant by tenant there
