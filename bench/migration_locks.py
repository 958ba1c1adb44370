"""`python -m bench.migration_locks [--size 1000000] [--db postgres,sqlite] [--write]`

How long the latest schema migrations hold off a live fleet's writes, on a
database of `size` runs (seeded as the scale run seeds, bench/w_scale.py).
For each migration measured, the database is put back to before it (bench-
only SQL that undoes it: `UNDO`), then `stead db migrate` applies it
(`stead.store.upgrade`, the code path a deploy takes) while two writers go
on, each statement timed: one updating a run (the table that grows) and one
writing a heartbeat (`worker_hosts`, which 0030 alters). The longest any
one write waited is what the migration cost the fleet. 0026 is also applied
as stead 0.1.0 applied it (a plain CREATE INDEX in the migrating
transaction) for comparison. Not part of CI nor of `python -m bench`; with
`--write` the section between the markers of bench/RESULTS.md is replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sqlite3
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import stead
from bench import common, machine, runner
from stead.store import schema_versions

STEAD = runner.System("stead", "stead", "bench.w_scale", runner.project_python())
BEGIN, END = "<!-- migration locks: begin -->", "<!-- migration locks: end -->"
MEASURED = (24, 26, 28, 30)
# What puts a database back to before each migration (bench only).
UNDO: dict[int, tuple[str, ...]] = {
    24: ("DROP TABLE stream_entries",),
    26: ("DROP INDEX runs_created",),
    28: ("DROP TABLE worker_processes",),
    30: ("ALTER TABLE worker_hosts DROP COLUMN stead_version",
         "ALTER TABLE worker_hosts DROP COLUMN schema_version",
         "ALTER TABLE stead_schema DROP COLUMN name",
         "ALTER TABLE stead_schema DROP COLUMN compatible",
         "ALTER TABLE stead_schema DROP COLUMN applied_at",
         "ALTER TABLE stead_schema DROP COLUMN stead_version"),
}
PLAIN_0026 = "CREATE INDEX runs_created ON runs (created_at, run_id)"  # as 0.1.0 built it


class Database:
    """Plain statements on the bench database, outside stead."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sqlite = url.startswith("sqlite")

    def connect(self) -> Any:
        if self.sqlite:
            conn = sqlite3.connect(common.sqlite_path(self.url), timeout=60,
                                   isolation_level=None, check_same_thread=False)
            return conn
        import psycopg

        return psycopg.connect(self.url, autocommit=True)

    def run(self, *statements: str) -> list[tuple[Any, ...]]:
        conn = self.connect()
        try:
            rows: list[tuple[Any, ...]] = []
            for statement in statements:
                cur = conn.execute(statement)
                rows = cur.fetchall() if cur.description else []
            return rows
        finally:
            conn.close()

    def undo(self, version: int) -> None:
        self.run(*UNDO[version], f"DELETE FROM stead_schema WHERE version = {version}")


class Writer(threading.Thread):
    """One statement again and again, each timed (ms)."""

    def __init__(self, db: Database, statement: str, params: tuple[Any, ...]) -> None:
        super().__init__(daemon=True)
        self.db, self.statement, self.params = db, statement, params
        self.times: list[float] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        conn = self.db.connect()
        statement = self.statement.replace("%s", "?") if self.db.sqlite else self.statement
        try:
            while not self.stopping.is_set():
                t0 = time.monotonic()
                conn.execute(statement, self.params)
                self.times.append((time.monotonic() - t0) * 1000)
                time.sleep(0.002)
        finally:
            conn.close()


def while_writing(db: Database, apply: Callable[[], object]) -> dict[str, float]:
    """Run `apply` while the writers write: its seconds, and the longest and
    median write (ms) of each writer while it ran."""
    [(run_id,)] = db.run("SELECT run_id FROM runs WHERE status = 'waiting' LIMIT 1")
    writers = {
        "runs": Writer(db, "UPDATE runs SET updated_at = updated_at WHERE run_id = %s",
                       (run_id,)),
        "hosts": Writer(db, "UPDATE worker_hosts SET seen_at = seen_at WHERE worker_id <> %s",
                        ("",)),
    }
    for w in writers.values():
        w.start()
    time.sleep(0.5)  # the writers' pace before
    marks = {k: len(w.times) for k, w in writers.items()}
    t0 = time.monotonic()
    apply()
    seconds = time.monotonic() - t0
    time.sleep(0.2)
    for w in writers.values():
        w.stopping.set()
        w.join()
    out = {"seconds": seconds}
    for key, w in writers.items():
        during = w.times[marks[key]:] or [0.0]
        out[f"{key}_max_ms"] = max(during)
        out[f"{key}_p50_ms"] = statistics.median(during)
    return out


def measure(db_kind: str, size: int, scratch: Any, log: Callable[[str], None]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    with runner.fresh_database(db_kind, scratch) as url:
        log(f"{db_kind} {size:,}: seeding")
        seed = runner.run(STEAD, {"workload": "seed", "url": url, "size": size}, timeout=7200)
        found["bytes"] = seed["bytes"]
        db = Database(url)
        for version in MEASURED:
            db.undo(version)
            log(f"  applying {version:04d}")
            found[str(version)] = while_writing(
                db, lambda: asyncio.run(stead.store.upgrade(url)))
        db.undo(26)
        log("  applying 0026 as 0.1.0 did")
        found["26_plain"] = while_writing(db, lambda: db.run(PLAIN_0026))
        db.run("INSERT INTO stead_schema (version) VALUES (26)")
    return found


def section(found: dict[str, dict[str, Any]], size: int, elapsed: float) -> str:
    names = {m.version: m for m in schema_versions.known("postgres")}
    lines = [BEGIN, f"## Migration locks: the latest migrations on {size:,} runs (issue 41)", "",
             f"Written by `python -m bench.migration_locks` on "
             f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC in "
             f"{elapsed / 60:.1f} min; not part of CI nor of `python -m bench`. Each database "
             f"holds {size:,} runs seeded as the scale run seeds them; each migration is undone "
             "by bench-only SQL, then applied by `stead db migrate` while two writers go on, "
             "each statement timed: a run's row updated (`runs`) and the heartbeats "
             "(`worker_hosts`). Each cell gives the longest one write waited while the "
             "migration ran (what the fleet noticed) and, in brackets, the writes' median "
             f"then. Shared 2-core box (load: {machine.load_now()}), single measurements.",
             ""]
    for db_kind, by in found.items():
        label = {"postgres": "PostgreSQL", "sqlite": "SQLite"}[db_kind]
        lines += [f"### {label}", "",
                  "| migration | declared | took (s) | a write to runs waited (ms) | "
                  "a heartbeat waited (ms) |", "|---|---|---|---|---|"]
        rows = [(str(v), f"{v:04d} {names[v].name}", _declared(db_kind, v)) for v in MEASURED]
        rows.append(("26_plain", "0026 runs_list as stead 0.1.0 built it (plain CREATE INDEX "
                                 "in the migrating transaction)", "-"))
        for key, name, declared in rows:
            m = by[key]
            lines.append(f"| {name} | {declared} | {m['seconds']:.2f} | "
                         f"{m['runs_max_ms']:,.0f} ({m['runs_p50_ms']:.1f}) | "
                         f"{m['hosts_max_ms']:,.0f} ({m['hosts_p50_ms']:.1f}) |")
        lines += ["", f"- {by['bytes'] / 1e6:,.0f} MB in use after the seed.", ""]
    lines.append(END)
    return "\n".join(lines)


def _declared(db_kind: str, version: int) -> str:
    m = next(m for m in schema_versions.known(db_kind) if m.version == version)
    return m.traits


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.migration_locks")
    p.add_argument("--size", type=int, default=1_000_000)
    p.add_argument("--db", default="postgres,sqlite", type=lambda s: s.split(","))
    p.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    args = p.parse_args(argv)

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    t0 = time.monotonic()
    found: dict[str, dict[str, Any]] = {}
    with runner.scratch_dir() as scratch:
        for db_kind in args.db:
            found[db_kind] = measure(db_kind, args.size, scratch, log)
    text = section(found, args.size, time.monotonic() - t0)
    print(text)
    if args.write:
        runner.write_section(text, runner.BENCH / "RESULTS.md", BEGIN, END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
