"""`python -m bench.partition_migration [--runs 1000000] [--steps 5]`

Migration 41 (the journal and the events partitioned by day) on a large
database, online: a PostgreSQL schema made by the migrations up to 38 (the
previous release's) is filled with `--runs` finished runs of the old id
shape (uuid4 hex), `--steps` journal records and one event each, bulk-loaded
on the server; then one connection writes and reads as the previous release
does (prepared statements: journal and event inserts naming their columns,
a `SELECT *` of events), one round after another, while this code opens the
database and migrates it. Printed as JSON: how long the fill and the
migration took, how many rounds the old writer made during it, their
slowest and p99, and any that failed (none is the promise). Not part of CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
import uuid
from typing import Any

import psycopg

import stead
from stead.store import schema_versions, sql_files

URL = "postgresql://postgres@127.0.0.1:5432/test"
BEFORE = 38  # the previous release's schema
FILL = (
    "INSERT INTO runs (run_id, workflow, version, status, input, epoch, created_at, "
    "updated_at, queue, priority) SELECT replace(gen_random_uuid()::text, '-', ''), 'w', 1, "
    "'completed', '{\"args\":[],\"kwargs\":{}}', 1, 0, 0, 'default', 0 "
    "FROM generate_series(1, %(runs)s)",
    "INSERT INTO journal (run_id, seq, addr, attempt, kind, name, digest, status, payload, "
    "epoch, at) SELECT r.run_id, s, s::text, 1, 'step', 's', 'd', 'ok', '\"a result\"', 1, 0 "
    "FROM runs AS r, generate_series(0, %(steps)s - 1) AS s",
    "INSERT INTO events (run_id, event_id, payload, bind, verdict, received_at) "
    "SELECT run_id, 'e', '{}', '{}', 'accepted', 0 FROM runs",
)
ROUND = (
    "INSERT INTO journal (run_id, seq, addr, attempt, kind, name, digest, status, payload, "
    "epoch, at) VALUES (%s, %s, 'x', 1, 'step', 's', 'd', 'ok', '1', 1, 0)",
    "INSERT INTO events (run_id, event_id, payload, bind, verdict, received_at) "
    "VALUES (%s, %s, '{}', '{}', 'accepted', 0)",
    "SELECT * FROM events WHERE run_id = %s AND event_id = %s",
)


def make(schema: str) -> None:
    """The schema as the migrations up to BEFORE make it."""
    q = sql_files.queries("postgres")
    with psycopg.connect(URL, autocommit=True) as conn, conn.transaction():
        conn.execute(q["name_schema"].encode(), {"schema": schema})
        conn.execute(q["create_schema"].encode())
        conn.execute(f'SET LOCAL search_path = "{schema}"'.encode())
        conn.execute(q["create_version_table"].encode())
        for m in schema_versions.known("postgres"):
            if m.version <= BEFORE:
                conn.execute(m.in_one_transaction().encode())
                query, params = schema_versions.version_row(m, time.time())
                conn.execute(q[query].encode(), params)


def fill(schema: str, runs: int, steps: int) -> float:
    t0 = time.monotonic()
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f'SET search_path = "{schema}"'.encode())
        with conn.transaction():
            for sql in FILL:
                conn.execute(sql.encode(), {"runs": runs, "steps": steps})
        conn.execute(b"VACUUM ANALYZE")
        conn.execute(b"CHECKPOINT")
    return time.monotonic() - t0


class OldRounds(threading.Thread):
    """The previous release's writes and reads, one round after another."""

    def __init__(self, schema: str, run_id: str) -> None:
        super().__init__(daemon=True)
        self.schema, self.run_id = schema, run_id
        self.stop = threading.Event()
        self.rounds: list[tuple[float, float]] = []  # (when it began, seconds)
        self.failed: list[str] = []

    def run(self) -> None:
        with psycopg.connect(URL, autocommit=True, prepare_threshold=0) as conn:
            conn.execute(f'SET search_path = "{self.schema}"'.encode())
            i = 0
            while not self.stop.is_set():
                t0 = time.monotonic()
                try:
                    conn.execute(ROUND[0].encode(), (self.run_id, 1000 + i))
                    conn.execute(ROUND[1].encode(), (self.run_id, f"r{i}"))
                    conn.execute(ROUND[2].encode(), (self.run_id, f"r{i}")).fetchone()
                except psycopg.Error as exc:
                    self.failed.append(f"{type(exc).__name__}: {exc}")
                self.rounds.append((t0, time.monotonic() - t0))
                i += 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.partition_migration")
    p.add_argument("--runs", type=int, default=1_000_000)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--keep", action="store_true", help="keep the schema afterwards")
    args = p.parse_args(argv)
    schema = f"bench_migrate_{uuid.uuid4().hex[:8]}"
    try:
        make(schema)
        filled = fill(schema, args.runs, args.steps)
        print(f"filled {args.runs:,} runs in {filled:.1f} s", file=sys.stderr, flush=True)
        with psycopg.connect(URL) as conn:
            conn.execute(f'SET search_path = "{schema}"'.encode())
            row = conn.execute(b"SELECT min(run_id) FROM runs").fetchone()
        assert row is not None
        old = OldRounds(schema, str(row[0]))
        old.start()
        time.sleep(1.0)
        t0 = time.monotonic()

        async def migrate() -> None:
            store = await stead.open_store(f"{URL}?schema={schema}")
            await store.close()

        asyncio.run(migrate())
        migrated = (time.monotonic() - t0, time.monotonic())
        time.sleep(1.0)
        old.stop.set()
        old.join(30)
        during = sorted(s for at, s in old.rounds if t0 <= at <= migrated[1])
        out: dict[str, Any] = {
            "runs": args.runs, "journal_rows": args.runs * args.steps,
            "fill_seconds": round(filled, 1), "migration_seconds": round(migrated[0], 2),
            "old_rounds_during": len(during),
            "old_round_p50_ms": round(during[len(during) // 2] * 1000, 1) if during else None,
            "old_round_p99_ms": round(during[int(0.99 * (len(during) - 1))] * 1000, 1)
            if during else None,
            "old_round_max_ms": round(during[-1] * 1000, 1) if during else None,
            "old_rounds_failed": old.failed[:5], "old_failures": len(old.failed)}
        print(json.dumps(out, indent=1))
        return 0 if not old.failed else 1
    finally:
        if not args.keep:
            with psycopg.connect(URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


if __name__ == "__main__":
    raise SystemExit(main())
