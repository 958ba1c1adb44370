"""The physical limit: one durable commit per step, nothing else. SQLite: WAL,
synchronous=FULL, `BEGIN IMMEDIATE; INSERT; COMMIT` per row. PostgreSQL: one
autocommit INSERT per row (synchronous_commit as the server has it: on).
A row is about the size of a journal record of a trivial step."""

from __future__ import annotations

import sqlite3
from typing import Any

from bench import common

ROW = ("0123456789abcdef0123456789abcdef", 0, "7", "step", "s",
       "0123456789abcdef0123456789abcdef", "ok", "7", 1, 0.0)
SQL_CREATE = (
    "CREATE TABLE journal (run_id TEXT, seq INTEGER, addr TEXT, kind TEXT, name TEXT,"
    " digest TEXT, status TEXT, payload TEXT, epoch INTEGER, at REAL,"
    " PRIMARY KEY (run_id, seq))"
)


def sqlite_limit(url: str, n: int) -> float:
    conn = sqlite3.connect(common.sqlite_path(url), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(SQL_CREATE)
    insert = "INSERT INTO journal VALUES (?,?,?,?,?,?,?,?,?,?)"
    t0 = common.now()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(insert, (ROW[0], i, *ROW[2:]))
        conn.execute("COMMIT")
    elapsed = common.now() - t0
    conn.close()
    return elapsed


def pg_limit(url: str, n: int) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SQL_CREATE.replace("REAL", "DOUBLE PRECISION"))
        insert = "INSERT INTO journal VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
        t0 = common.now()
        for i in range(n):
            conn.execute(insert, (ROW[0], i, *ROW[2:]))
        return common.now() - t0


def main() -> None:
    job: dict[str, Any] = common.args()
    fn = sqlite_limit if job["url"].startswith("sqlite") else pg_limit
    common.result({"seconds": fn(job["url"], job["n"]), "sqlite_commits": job["n"],
                   "store_commits": job["n"]})


if __name__ == "__main__":
    main()
