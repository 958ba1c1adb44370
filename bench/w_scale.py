"""stead's side of the scale run (`python -m bench.scale`), run in the
project's venv as `python -m bench.w_scale '{"workload": ..., "url": ...}'`.

- `seed`: make the schema, run one real run of each kind through stead (a
  finished `small` run, an `approval` run waiting for its event), then copy
  their rows (runs, journal, waits) `size` times with new ids, in SQL on the
  server (generate_series / a recursive CTE): 90% finished, 10% waiting, all
  in the queue `bench`, started over the past hours. The copies are rows
  stead made, so tables and indexes are the size a million runs make; they
  are never claimed (finished, or waiting for an event that never comes).
- `starts`: `client.start_many` of `runs` runs of `small` in the queue.
- `worker`: a worker on the queue; it times every claim and says WOKE when an
  approval run takes its step after the wait (bench.w_stead's `woke`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from bench import common
from bench.w_stead import app, approval, small

import stead
from stead.records import RunRow
from stead.testing import DelegatingStore

QUEUE = app.queue("bench", concurrency=64)
# Where the timed one-at-a-time starts go, after the workers have stopped.
IDLE = app.queue("bench_idle", concurrency=1)
FINISHED_SHARE = 0.9


# -- seeding ---------------------------------------------------------------------------
# PostgreSQL: time-ordered ids, as stead makes them (stead/run_ids.py): the
# prefix, the start in ms, then the copy's number where stead puts randomness
# (its last hex digit says which template), so each copy lands in its day's
# partition of the journal.
PG_ID = ("'0000000000007' || lpad(to_hex(((%(t0)s + g * %(gap)s) * 1000)::bigint), 12, '0')"
         " || lpad(to_hex(g), 14, '0') || %(tag)s")
PG_CLONE_RUNS = f"""
INSERT INTO runs (run_id, workflow, version, task_id, status, input, result, error, epoch,
                  lease_owner, lease_expires_at, created_at, updated_at, wake_at,
                  intent_version, queue, priority, dedup_key, started_at)
SELECT {PG_ID}, t.workflow, t.version, NULL, t.status, t.input, t.result, t.error,
       t.epoch, NULL, NULL, %(t0)s + g * %(gap)s, %(t0)s + g * %(gap)s + 0.05, NULL, 0,
       t.queue, 0, NULL, %(t0)s + g * %(gap)s + 0.01
FROM runs AS t, generate_series(1, %(n)s) AS g
WHERE t.run_id = %(template)s
"""
PG_CLONE_JOURNAL = f"""
INSERT INTO journal (run_id, seq, addr, attempt, kind, name, digest, status, payload, epoch, at)
SELECT {PG_ID}, j.seq, j.addr, j.attempt, j.kind, j.name, j.digest, j.status,
       j.payload, j.epoch, %(t0)s + g * %(gap)s + 0.02
FROM journal AS j, generate_series(1, %(n)s) AS g
WHERE j.run_id = %(template)s
"""
PG_CLONE_WAITS = f"""
INSERT INTO waits (wait_id, run_id, addr, kind, bind, schema, token_hash, task_key,
                   expires_at, state, created_at)
SELECT {PG_ID} || '-wait', {PG_ID}, w.addr, w.kind, w.bind, w.schema,
       w.token_hash, {PG_ID}, w.expires_at, w.state, %(t0)s + g * %(gap)s + 0.02
FROM waits AS w, generate_series(1, %(n)s) AS g
WHERE w.run_id = %(template)s
"""
# The day partitions the copies fill, made before they are loaded.
PG_ADD_DAYS = """
SELECT stead_add_day(d::date)
FROM generate_series(to_timestamp(%(t0)s) AT TIME ZONE 'UTC',
                     now() AT TIME ZONE 'UTC' + interval '1 day', interval '1 day') AS d
"""
COUNT_STATUSES = "SELECT status, count(*) FROM runs GROUP BY status"
# SQLite: the same, numbered by a recursive CTE.
SQ_SERIES = "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < :n) "
SQ_CLONE_RUNS = SQ_SERIES + """
INSERT INTO runs (run_id, workflow, version, task_id, status, input, result, error, epoch,
                  lease_owner, lease_expires_at, created_at, updated_at, wake_at,
                  intent_version, queue, priority, dedup_key, started_at)
SELECT :prefix || g.i, t.workflow, t.version, NULL, t.status, t.input, t.result, t.error,
       t.epoch, NULL, NULL, :t0 + g.i * :gap, :t0 + g.i * :gap + 0.05, NULL, 0, t.queue, 0,
       NULL, :t0 + g.i * :gap + 0.01
FROM runs AS t, g WHERE t.run_id = :template
"""
SQ_CLONE_JOURNAL = SQ_SERIES + """
INSERT INTO journal (run_id, seq, addr, attempt, kind, name, digest, status, payload, epoch, at)
SELECT :prefix || g.i, j.seq, j.addr, j.attempt, j.kind, j.name, j.digest, j.status,
       j.payload, j.epoch, :t0 + g.i * :gap + 0.02
FROM journal AS j, g WHERE j.run_id = :template
"""
SQ_CLONE_WAITS = SQ_SERIES + """
INSERT INTO waits (wait_id, run_id, addr, kind, bind, schema, token_hash, task_key,
                   expires_at, state, created_at)
SELECT :prefix || g.i || '-wait', :prefix || g.i, w.addr, w.kind, w.bind, w.schema,
       w.token_hash, :prefix || g.i, w.expires_at, w.state, :t0 + g.i * :gap + 0.02
FROM waits AS w, g WHERE w.run_id = :template
"""


async def templates(url: str) -> tuple[str, str]:
    """One finished `small` run and one `approval` run waiting, made by stead."""
    store = await stead.open_store(url)
    try:
        client = stead.Client(store, app)
        done = await client.start(small, 0, queue="bench")
        waiting = await client.start(approval, queue="bench")
        await stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.02)).run_until_idle()
        assert (await client.get(done.run_id)).status == "completed"
        assert (await client.get(waiting.run_id)).status == "waiting"
        return done.run_id, waiting.run_id
    finally:
        await store.close()


def clone(url: str, size: int, done: str, waiting: str,
          checkpoint: bool = True, days: int = 10) -> dict[str, Any]:
    """Copy the templates' rows: `size` runs in all, 90% finished."""
    finished = int(size * FINISHED_SHARE) - 1
    waits = size - finished - 2
    # The finished runs started over the `days` days before the last two
    # hours, the waiting ones over the hour before now: every day but the
    # last holds finished runs only, which retention may drop whole.
    span = days * 86400.0
    t_end = time.time() - 7200.0
    jobs = [("f", "a", done, finished, False, t_end - span, span / max(1, finished)),
            ("w", "b", waiting, waits, True, t_end + 3600.0, 3600.0 / max(1, waits))]
    timings: dict[str, Any] = {"days": days}
    if url.startswith("sqlite"):
        conn = sqlite3.connect(common.sqlite_path(url), isolation_level=None)
        try:
            for prefix, tag, template, n, with_waits, t0, gap in jobs:
                p = {"prefix": prefix, "tag": tag, "template": template, "n": n, "t0": t0,
                     "gap": gap}
                t = common.now()
                conn.execute("BEGIN")
                for sql in (SQ_CLONE_RUNS, SQ_CLONE_JOURNAL,
                            *((SQ_CLONE_WAITS,) if with_waits else ())):
                    conn.execute(sql, p)
                conn.execute("COMMIT")
                timings[f"{prefix}_seconds"] = common.now() - t
            t = common.now()
            conn.execute("ANALYZE")
            timings["analyze_seconds"] = common.now() - t
            timings["statuses"] = dict(conn.execute(COUNT_STATUSES).fetchall())
        finally:
            conn.close()
        return timings
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PG_ADD_DAYS, {"t0": t_end - span})
        for prefix, tag, template, n, with_waits, t0, gap in jobs:
            p = {"prefix": prefix, "tag": tag, "template": template, "n": n, "t0": t0,
                 "gap": gap}
            t = common.now()
            with conn.transaction():
                for sql in (PG_CLONE_RUNS, PG_CLONE_JOURNAL,
                            *((PG_CLONE_WAITS,) if with_waits else ())):
                    conn.execute(sql, p)
            timings[f"{prefix}_seconds"] = common.now() - t
        t = common.now()
        conn.execute("VACUUM ANALYZE")
        timings["analyze_seconds"] = common.now() - t
        # The bulk load wrote the size of the database in WAL: without a
        # checkpoint now, the checkpointer writes it back while the runs are
        # measured, and every commit's flush waits behind those writes.
        t = common.now()
        if checkpoint:
            conn.execute("CHECKPOINT")
        timings["checkpoint_seconds"] = common.now() - t if checkpoint else None
        timings["statuses"] = dict(conn.execute(COUNT_STATUSES).fetchall())
    return timings


async def w_seed(job: dict[str, Any]) -> dict[str, Any]:
    done, waiting = await templates(job["url"])
    timings = clone(job["url"], job["size"], done, waiting, job.get("checkpoint", True),
                    job.get("days", 10))
    return {**timings, "bytes": common.used_bytes(job["url"])}


# -- measuring -----------------------------------------------------------------------------
async def w_starts(job: dict[str, Any]) -> dict[str, Any]:
    store = await stead.open_store(job["url"])
    try:
        client = stead.Client(store, app)
        wanted = [stead.Start(small, [i], queue="bench") for i in range(job["runs"])]
        t0 = common.now()
        infos = await client.start_many(wanted, batch=job.get("batch", 1000))
        seconds = common.now() - t0
        assert all(i.created for i in infos)
        return {"seconds": seconds, "run_ids": [i.run_id for i in infos]}
    finally:
        await store.close()


class Timed(DelegatingStore):
    """Times every claim the worker makes (ms), and whether it took a run."""

    def __init__(self, inner: stead.Store) -> None:
        super().__init__(inner)
        self.took: list[float] = []
        self.idle: list[float] = []

    def _note(self, t0: float, rows: list[RunRow]) -> list[RunRow]:
        (self.took if rows else self.idle).append((common.now() - t0) * 1000)
        return rows

    async def claim_queue(self, queue: stead.Queue, worker_id: str, hosted: Sequence[str],
                          lease_seconds: float, limit: int,
                          exclude: Sequence[str] = ()) -> list[RunRow]:
        t0 = common.now()
        rows = await self.inner.claim_queue(queue, worker_id, hosted, lease_seconds, limit,
                                            exclude)
        return self._note(t0, rows)


async def w_worker(job: dict[str, Any]) -> dict[str, Any]:
    inner = await stead.open_store(job["url"])
    store = Timed(inner)
    worker = stead.Worker(app, store, stead.WorkerOptions(
        concurrency=job.get("concurrency", 16), worker_id=job["worker_id"]))
    loop = asyncio.get_running_loop()
    common.emit("READY", {"pid": os.getpid()})
    await loop.run_in_executor(None, input)  # the parent says go
    task = asyncio.create_task(worker.run())
    await loop.run_in_executor(None, input)  # the parent says stop
    worker.stop()
    await task
    await inner.close()
    return {"took_ms": store.took, "idle_ms": store.idle}


def _ms(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"p50": xs[len(xs) // 2] * 1000, "p99": xs[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))]
            * 1000, "n": len(xs)}


async def w_latency(job: dict[str, Any]) -> dict[str, Any]:
    """One start at a time (`client.start`, in a queue no worker serves), and
    the run page of seeded runs taken at random (`stead.web.views.run_page`:
    what the dashboard reads for one run), each timed."""
    from stead.web import views, window

    store = await stead.open_store(job["url"])
    try:
        client = stead.Client(store, app)
        starts = []
        for i in range(job["n"]):
            t0 = common.now()
            await client.start(small, i, queue="bench_idle")
            starts.append(common.now() - t0)
        pages = []
        for run_id in job["run_ids"]:
            t0 = common.now()
            await views.run_page(client, run_id, window.Window())
            pages.append(common.now() - t0)
        return {"start": _ms(starts), "page": _ms(pages)}
    finally:
        await store.close()


async def w_prune_day(job: dict[str, Any]) -> dict[str, Any]:
    """Retention of the oldest seeded day (PostgreSQL): its partitions
    emptied with its runs and dropped; how long it took, and how long the
    drop's transaction held its lock on journal and events."""
    store = await stead.open_store(job["url"])
    try:
        [oldest, *_] = await store.ended_days(time.time())
        cutoff = dt.datetime(oldest.day.year, oldest.day.month, oldest.day.day,
                             tzinfo=dt.UTC).timestamp() + 86400.0 + 1.0
        t0 = common.now()
        report = await stead.prune(store, time.time() - cutoff)
        return {"seconds": common.now() - t0, "deleted": report.deleted, "days": report.days,
                "longest_drop": report.longest_drop, "day": oldest.day.isoformat()}
    finally:
        await store.close()


WORKLOADS = {"seed": w_seed, "starts": w_starts, "worker": w_worker, "latency": w_latency,
             "prune_day": w_prune_day}


def main() -> None:
    job = common.args()
    out = asyncio.run(WORKLOADS[job["workload"]](job))
    common.result(out)


if __name__ == "__main__":
    main()
