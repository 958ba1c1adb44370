"""Write an upgrade fixture with the stead on the path: a database holding a
run in every state, as that release wrote it, dumped to files the upgrade
tests restore (tests/upgrade/test_fixtures.py). Run it once per release,
with that release's code first on the path:

    git worktree add --detach /tmp/old-28 6fe33bd
    PYTHONPATH=/tmp/old-28/src:. python -m tests.upgrade.make_fixture \\
        tests/upgrade/fixtures/schema-28 --commit 6fe33bd

It writes the same runs into an SQLite file and into a PostgreSQL database of
its own (on STEAD_TEST_POSTGRES_URL's server), then leaves in the folder:
`sqlite.sql` (the file as SQL), `postgres.sql` (pg_dump of schema
`stead_fixture`) and `runs.json` (which run is in which state, and what its
effects had sent). The fixtures are committed; nothing here runs in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import stead
from tests.upgrade import app as upgrade_app
from tests.upgrade.app import app

SECRET = "stead-upgrade-fixtures"  # STEAD_SECRET: the key of the waits' tokens
SCHEMA = "stead_fixture"
SERVER = os.environ.get("STEAD_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
# What each run is left doing.
EXPECTED = {
    "completed": "completed", "approval": "waiting", "sleeping": "waiting",
    "paused": "paused", "parent": "waiting", "child": "waiting", "unknown": "running",
    "queued": "pending",
}


async def write_runs(url: str, here: Path) -> dict[str, str]:
    """Start and drive a run into each state; their ids by state."""
    store = await stead.open_store(url)
    client = stead.Client(store, app)
    ids: dict[str, str] = {}
    try:
        for state, workflow, args, extra in (
            ("completed", upgrade_app.approval, ["c1"], {"task_id": "order-c1"}),
            ("approval", upgrade_app.approval, ["a1"], {"task_id": "order-a1"}),
            ("sleeping", upgrade_app.sleeper, [600], {}),
            ("paused", upgrade_app.refund, ["r1", 150],
             {"intent": stead.Intent(goal="refund r1", grants=[stead.Grant("refund")])}),
            ("parent", upgrade_app.parent, ["p1"], {}),
        ):
            ids[state] = (await client.start(workflow, *args, **extra)).run_id
        await stead.Worker(app, store).run_until_idle()
        await client.deliver(ids["completed"], event_id="ok", kind="approval",
                             payload={"approved": True},
                             operator=stead.Operator(by="fixture", why="approved"))
        await stead.Worker(app, store).run_until_idle()
        [child] = [r for r in await client.list_runs(limit=100) if r.task_id == "child-p1"]
        ids["child"] = child.run_id
        ids["unknown"] = (await client.start(upgrade_app.charge, "u1")).run_id
    finally:
        await store.close()
    # A worker process dies in the middle of the charge it sent.
    died = subprocess.run([sys.executable, "-m", "tests.upgrade.make_fixture", "--die", url],
                          env={**os.environ, upgrade_app.DIE: "1"}, cwd=here)
    assert died.returncode == -9, f"the charging worker exited {died.returncode}"
    store = await stead.open_store(url)
    client = stead.Client(store, app)
    try:
        # Last, with no worker after it: a run in a queue, not yet claimed.
        ids["queued"] = (await client.start(upgrade_app.queued, 21, queue="held")).run_id
        found = {state: str((await client.get(run_id)).status) for state, run_id in ids.items()}
    finally:
        await store.close()
    assert found == EXPECTED, found
    return ids


async def die(url: str) -> None:
    store = await stead.open_store(url)
    await stead.Worker(app, store).run_until_idle()  # killed in `charge_card`


def dump_sqlite(path: Path, out: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        out.write_text("\n".join(conn.iterdump()) + "\n", encoding="utf-8")
    finally:
        conn.close()


def database_url(database: str) -> str:
    parts = urlsplit(SERVER)
    return urlunsplit(parts._replace(path=f"/{database}", query=f"schema={SCHEMA}"))


def admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(sql.encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the fixture's folder (or the URL, with --die)")
    parser.add_argument("--commit", default="", help="the commit the code on the path is")
    parser.add_argument("--die", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ["STEAD_SECRET"] = SECRET
    if args.die:
        asyncio.run(die(args.out))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).resolve().parents[2]
    database = f"stead_fixture_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Path(tmp) / "ledger.jsonl"
        os.environ[upgrade_app.LEDGER] = str(ledger)
        db = Path(tmp) / "stead.db"
        sqlite_ids = asyncio.run(write_runs(f"sqlite:///{db}", here))
        sqlite_ledger = ledger.read_text().splitlines()
        ledger.unlink()
        dump_sqlite(db, out / "sqlite.sql")
        admin(f"CREATE DATABASE {database}")
        try:
            pg_ids = asyncio.run(write_runs(database_url(database), here))
            pg_ledger = ledger.read_text().splitlines()
            dumped = subprocess.run(
                ["pg_dump", "--no-owner", "--no-privileges", f"--schema={SCHEMA}",
                 f"--dbname={urlunsplit(urlsplit(SERVER)._replace(path=f'/{database}'))}"],
                capture_output=True, text=True, check=True)
            (out / "postgres.sql").write_text(dumped.stdout, encoding="utf-8")
        finally:
            admin(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    from stead.store import sql_files

    described = {
        "schema": max(v for v, _ in sql_files.migrations("sqlite")),
        "stead": stead.__version__, "commit": args.commit, "made_at": time.time(),
        "secret": SECRET,
        "runs": {"sqlite": sqlite_ids, "postgres": pg_ids},
        "ledger": {"sqlite": [json.loads(line) for line in sqlite_ledger],
                   "postgres": [json.loads(line) for line in pg_ledger]},
    }
    (out / "runs.json").write_text(json.dumps(described, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}: schema {described['schema']}, stead {described['stead']}")


if __name__ == "__main__":
    main()
