"""The store's logic is written once over a small seam: what a backend must
supply, and what each dialect's SQL file must answer."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import stead
from stead.store import base, sql_files, transactions
from stead.store.seam import Database
from stead.testing import CrashingStore, CrashPoint, DelegatingStore

# Queries one dialect needs for what it does its own way (claiming, its
# journal statements, its migrations and LISTEN; on PostgreSQL, the presence
# lock that tells a dead lease holder on another machine).
ONLY = {
    "sqlite": {"claim_candidates", "claim", "insert_record_fenced", "finish", "insert_resume"},
    "postgres": {
        "claim", "claimed_by", "claim_unshared", "name_schema", "create_schema",
        "set_search_path", "create_version_table", "insert_version",
        "listen", "fenced_write", "append_one", "finish_one", "insert_records",
        "presence_lock", "presence_held",
        # a hot standby, or a read-only role: read, never migrate
        "read_only",
        # migrating online: lock waits bounded, the lock tried, not waited on
        "try_migrate_lock", "try_migrate_session_lock", "migrate_unlock",
        "oldest_transaction", "set_lock_timeout",
    },
}


def _flow_queries() -> set[str]:
    """Every query name the shared transactions (and the store) ask for."""
    names: set[str] = set()
    modules = [importlib.import_module(f"{package.__name__}.{info.name}")
               for package in (transactions, base)
               for info in pkgutil.iter_modules(package.__path__)]
    for module in [base, *modules]:
        tree = ast.parse(inspect.getsource(module))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                    and getattr(node.func, "id", getattr(node.func, "attr", None))
                    in {"one", "rows", "count", "execute", "read_one", "read_all"}):
                names.add(node.args[0].value)
    return names


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_each_dialect_answers_every_query_of_the_shared_transactions(dialect: str) -> None:
    used = _flow_queries()
    assert {"get_run", "fence", "insert_event", "renew", "lock_run"} <= used
    missing = used - set(sql_files.queries(dialect))
    assert not missing, f"{dialect}/sql/queries.sql lacks {sorted(missing)}"


def test_the_dialects_differ_only_in_what_a_backend_does_its_own_way() -> None:
    sqlite, postgres = set(sql_files.queries("sqlite")), set(sql_files.queries("postgres"))
    assert sqlite - postgres <= ONLY["sqlite"]
    assert postgres - sqlite <= ONLY["postgres"]


def test_a_backend_implements_a_handful_of_methods_not_the_whole_store() -> None:
    abstract = set(Database.__abstractmethods__)
    assert abstract == {"open", "close", "read", "write", "journal", "claim", "claim_unshared",
                        "commits"}
    assert not inspect.isabstract(stead.Store)
    # One shape; SQLite's database is also files a process can lose under it
    # (files.py: the -wal and -shm watch), which a server has no counterpart of,
    # and cannot notify, so an idle worker watches the -wal for writes instead
    # (wal_watch.py) where PostgreSQL LISTENs on its connection; a PostgreSQL
    # worker holds a presence lock on a session of its own
    # (presence.py), which SQLite on one machine needs no counterpart of,
    # and LISTENs on a session of its own (listener.py), which behind a
    # connection pooler may only be had through a direct URL (pooler.py).
    for backend, own in (("sqlite", ["files.py", "wal_watch.py"]),
                          ("postgres", ["presence.py", "listener.py", "pooler.py"])):
        folder = Path(stead.__file__).parent / "store" / backend
        assert sorted(p.name for p in folder.glob("*.py")) == sorted([
            "__init__.py", "connection.py", "database.py", "group.py", "journal.py",
            "migrate.py", *own,
        ])


async def test_a_crashing_store_refuses_to_sit_under_a_delegating_one(
    store: stead.Store,
) -> None:
    class Watching(DelegatingStore):
        pass

    with pytest.raises(TypeError, match=r"Watching\(CrashingStore\(store, point\)\)"):
        CrashingStore(Watching(store), CrashPoint(after_commit=1))
    # The other way round works, and sees the crash store's writes.
    watched = Watching(CrashingStore(store, CrashPoint(after_commit=99)))
    assert watched.commits == store.commits


def _code(sql: str) -> str:
    """SQL without its comment lines, its whitespace collapsed and no final `;`."""
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    return " ".join(" ".join(lines).split()).rstrip(";").strip()


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_an_accepted_event_is_stored_as_insert_event_stores_any_other(dialect: str) -> None:
    """`accept_event` repeats `insert_event`'s INSERT (in PostgreSQL's CTE, as
    SQLite's first statement): the two must not drift apart."""
    q = sql_files.queries(dialect)
    insert = _code(q["insert_event"])
    if dialect == "sqlite":
        first = re.split(r"^--\s*then\s*$", q["accept_event"], flags=re.MULTILINE)[0]
        assert _code(first) == insert
    else:
        body = _code(q["accept_event"])
        stored = body.split("WITH stored AS (", 1)[1].split(" RETURNING 1 )", 1)[0]
        assert stored.strip() == insert
