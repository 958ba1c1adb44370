"""`python -m bench.scale [--sizes 1000,1000000] [--db postgres,sqlite] [--runs 2000]
[--approvals 200] [--workers 4] [--repeat 1] [--seed-once] [--no-dbos] [--write]`

The scale run (not part of CI, nor of `python -m bench`): a database holding
`size` runs (90% finished, 10% waiting for an event, bulk-loaded from rows
stead made, see bench/w_scale.py), and `--workers` worker processes on one
queue. Measured at each size: the claim latency (every claim of the queue that
took runs, in the workers), `client.start_many` starts/s, runs/s executing
the started runs (3 steps each), and deliver → next step (an approval run
woken by `client.deliver`, until its next step runs in a worker). With
`--repeat N` the sizes take turns N times and each cell is the median of the
N measurements, with their range: one run's p99 on a shared box follows
whatever else the box did in that minute. Each measurement seeds its own
database, unless `--seed-once`: then a size over 100,000 runs is seeded once
(ten million take half an hour) and measured N times, its retention last. DBOS runs
the same queue workload (its runs enqueued on a queue of the same
concurrency, executed by as many processes, with as many finished workflows
already in its database). With `--write` the section between the scale
markers of bench/RESULTS.md is replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench import common, machine, runner

import stead
from stead.store import sql_files

STEAD = runner.System("stead", "stead", "bench.w_scale", runner.project_python())
DBOS = runner.System("dbos", "DBOS", "bench.w_dbos", runner.peers_python())
LATENCY_N = 200  # single starts, and run pages, timed
DELIVER_GAP = 0.02  # seconds between deliveries: each is judged alone
BEGIN, END = "<!-- scale run: begin -->", "<!-- scale run: end -->"
CONCURRENCY = 64  # the queue's, for stead and DBOS alike
PER_PROCESS = 16  # each worker process's slots (DBOS: worker_concurrency)
# With --seed-once, sizes up to this are still seeded afresh for each measurement: the
# runs a measurement adds (--runs + --approvals) would otherwise change a small size
RESEED_UP_TO = 100_000


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def merged(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell per metric from the repetitions of one size: the median, with
    every repetition's value kept under `<key>_all` for the range."""
    out = dict(reps[-1])
    for key, *_ in ROWS + EXTRA:
        # None: not measured in that repetition (a seeded database is pruned once, last)
        values = sorted(r[key] for r in reps if r[key] is not None)
        if not values:
            out[key] = float("nan")
            continue
        out[key] = values[len(values) // 2] if len(values) % 2 else (
            (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2)
        out[key + "_all"] = values
    return out


# -- stead ---------------------------------------------------------------------------------
async def wait_done(url: str, run_ids: list[str], timeout: float) -> float:
    """When the last of `run_ids` completed (they complete roughly in order)."""
    store = await stead.open_store(url)
    try:
        left = list(run_ids)
        deadline = time.monotonic() + timeout
        while left:
            run = await store.get_run(left[0])
            if run.status == "completed":
                left.pop(0)
                continue
            if run.status in ("failed", "cancelled"):  # it will never complete
                raise runner.BenchError(f"run {run.run_id} {run.status}: {run.error}")
            if time.monotonic() > deadline:
                raise runner.BenchError(f"{len(left)} runs not completed after {timeout}s")
            await asyncio.sleep(0.01)
        return common.now()
    finally:
        await store.close()


async def approvals(url: str, n: int,
                    timeout: float) -> tuple[dict[str, float], dict[str, float]]:
    """Start `n` approval runs in the queue, let the workers take them to their
    waits, then deliver each its event, DELIVER_GAP apart: when each delivery
    was sent, and when its call returned (the event committed)."""
    from bench.w_scale import app, approval

    store = await stead.open_store(url)
    try:
        client = stead.Client(store, app)
        infos = await client.start_many([stead.Start(approval, queue="bench")] * n)
        for info in infos:
            await client.wait_for(info.run_id, ["waiting"], timeout=timeout)
        sent: dict[str, float] = {}
        returned: dict[str, float] = {}
        for info in infos:
            await asyncio.sleep(DELIVER_GAP)
            t = common.now()
            verdict = await client.deliver(info.run_id, event_id=f"e-{info.run_id}",
                                           kind="approval", payload={"ok": True})
            if not isinstance(verdict, stead.Accepted):
                raise runner.BenchError(f"delivery to {info.run_id}: {verdict}")
            sent[info.run_id] = t
            returned[info.run_id] = common.now()
        return sent, returned
    finally:
        await store.close()


def measure_stead(db: str, size: int, args: argparse.Namespace, scratch: Path,
                  log: Any) -> dict[str, Any]:
    """One measurement of `size` runs on a database seeded for it alone."""
    with runner.fresh_database(db, scratch) as url:
        return measure_seeded(db, url, seed_stead(db, url, size, args, log), args, log,
                              prune=True)


def seed_stead(db: str, url: str, size: int, args: argparse.Namespace,
               log: Any) -> dict[str, Any]:
    log(f"stead {db} {size:,}: seeding")
    seed: dict[str, Any] = runner.run(
        STEAD, {"workload": "seed", "url": url, "size": size,
                "checkpoint": not args.no_checkpoint, "days": args.days}, timeout=7200)
    log(f"  seeded in {seed['f_seconds'] + seed['w_seconds']:.1f} s "
        f"(+{seed['analyze_seconds']:.1f} s analyze), {seed['bytes'] / 1e6:.0f} MB")
    return seed


def measure_seeded(db: str, url: str, seed: dict[str, Any], args: argparse.Namespace,
                   log: Any, *, prune: bool) -> dict[str, Any]:
    """The measurements on a seeded database; with `prune`, its oldest day's
    retention last (it deletes seeded runs, so it ends a database's use)."""
    starts = runner.run(STEAD, {"workload": "starts", "url": url, "runs": args.runs})
    log(f"  start_many: {args.runs / starts['seconds']:.0f} starts/s")
    plans = explain(db, url)  # with the started runs queued, before any is claimed
    workers = [runner.Child(STEAD, {"workload": "worker", "url": url,
                                    "worker_id": f"w{i}", "concurrency": PER_PROCESS})
               for i in range(args.workers)]
    try:
        for w in workers:
            w.wait_for("READY", 120)
        t_go = common.now()
        for w in workers:
            w.send_line()
        t_done = asyncio.run(wait_done(url, starts["run_ids"], 900))
        log(f"  executed: {args.runs / (t_done - t_go):.0f} runs/s")
        io_before = server_io(db, url)
        sent, returned = asyncio.run(approvals(url, args.approvals, 300))
        io_after = server_io(db, url)
        woke: dict[str, float] = {}
        deadline = time.monotonic() + 120
        while len(woke) < len(sent) and time.monotonic() < deadline:
            for w in workers:
                woke.update({p["run_id"]: p["at"] for t, p in list(w.lines) if t == "WOKE"})
            time.sleep(0.05)
        for w in workers:
            w.send_line()
        results = [w.finish(120) for w in workers]
    finally:
        for w in workers:
            w.kill()
    latency = runner.run(STEAD, {"workload": "latency", "url": url, "n": LATENCY_N,
                                 "run_ids": sample_runs(db, url, LATENCY_N)}, timeout=900)
    log(f"  start p50 {latency['start']['p50']:.1f} ms, run page p50 "
        f"{latency['page']['p50']:.1f} ms")
    pruned = None
    if prune and db == "postgres":
        pruned = runner.run(STEAD, {"workload": "prune_day", "url": url}, timeout=7200)
        log(f"  retention of day {pruned['day']}: {pruned['deleted']:,} runs in "
            f"{pruned['seconds']:.1f} s, drop held its lock {pruned['longest_drop']:.3f} s")
    wake_ms = [(woke[r] - sent[r]) * 1000 for r in sent if r in woke]
    call_ms = [(returned[r] - sent[r]) * 1000 for r in sent]
    resume_ms = [(woke[r] - returned[r]) * 1000 for r in sent if r in woke]
    took = [x for r in results for x in r["took_ms"]]
    idle = [x for r in results for x in r["idle_ms"]]
    return {
        "seed": seed, "starts_per_s": args.runs / starts["seconds"],
        "runs_per_s": args.runs / (t_done - t_go),
        "claim_p50": pct(took, 0.5), "claim_p99": pct(took, 0.99), "claims": len(took),
        "idle_p50": pct(idle, 0.5), "idle_claims": len(idle),
        "wake_p50": pct(wake_ms, 0.5), "wake_p99": pct(wake_ms, 0.99), "woken": len(wake_ms),
        "wake_call_p50": pct(call_ms, 0.5), "wake_call_p99": pct(call_ms, 0.99),
        "wake_resume_p50": pct(resume_ms, 0.5), "wake_resume_p99": pct(resume_ms, 0.99),
        "start_p50": latency["start"]["p50"], "start_p99": latency["start"]["p99"],
        "page_p50": latency["page"]["p50"], "page_p99": latency["page"]["p99"],
        "pruned": pruned,
        "prune_seconds": pruned["seconds"] if pruned else None,
        "prune_lock_ms": pruned["longest_drop"] * 1000 if pruned else None,
        "prune_runs": pruned["deleted"] if pruned else None,
        "plans": plans,
        "server_io": {k: io_after[k] - io_before[k] for k in io_after},
    }


def sample_runs(db: str, url: str, n: int) -> list[str]:
    """`n` seeded finished runs taken at random, for their run pages."""
    if db != "postgres":
        import sqlite3

        with contextlib.closing(sqlite3.connect(common.sqlite_path(url))) as conn:
            return [r[0] for r in conn.execute(
                "SELECT run_id FROM runs WHERE status = 'completed' AND run_id LIKE 'f%' "
                "ORDER BY random() LIMIT ?", (n,))]
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT run_id FROM runs TABLESAMPLE SYSTEM (1) "
                            "WHERE status = 'completed' AND queue = 'bench' "
                            "AND run_id LIKE '%%a' LIMIT %s", (n,)).fetchall()
        if len(rows) < n:  # a small database: a 1% sample holds too few
            rows = conn.execute("SELECT run_id FROM runs WHERE status = 'completed' "
                                "AND run_id LIKE '%%a' ORDER BY random() LIMIT %s",
                                (n,)).fetchall()
        return [r[0] for r in rows]


def server_io(db: str, url: str) -> dict[str, float]:
    """PostgreSQL's checkpoint and background-write counters (empty on SQLite):
    what the server wrote on its own while the deliveries were measured."""
    if db != "postgres":
        return {}
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT checkpoints_timed + checkpoints_req AS checkpoints, buffers_checkpoint,"
            " buffers_clean, buffers_backend, checkpoint_write_time, checkpoint_sync_time"
            " FROM pg_stat_bgwriter").fetchone()
        names = ("checkpoints", "buffers_checkpoint", "buffers_clean", "buffers_backend",
                 "checkpoint_write_ms", "checkpoint_sync_ms")
        return {n: float(v) for n, v in zip(names, row, strict=True)}


def explain(db: str, url: str) -> dict[str, list[str]]:
    """The plans of the queue's claim queries on this database (PostgreSQL:
    EXPLAIN ANALYZE in a transaction rolled back; SQLite: EXPLAIN QUERY PLAN)."""
    from bench.w_scale import app

    now = time.time()
    params: dict[str, Any] = {"queue": "bench", "worker_id": "explain", "now": now,
                              "lease_now": now, "lease_seconds": 30,
                              "expires": now + 30, "since": now - 60, "limit": PER_PROCESS,
                              "hosted": app.hosted(), "exclude": []}
    # The plain claim too (SQLite's reads its candidates first): the queue's runs
    # must not slow it down.
    names = ("queue_ready", "queue_load", "claim_queue",
             "claim_candidates" if db == "sqlite" else "claim")
    out: dict[str, list[str]] = {}
    if db == "sqlite":
        import sqlite3

        q = sql_files.queries("sqlite")
        conn = sqlite3.connect(common.sqlite_path(url))
        try:
            p = {k: json.dumps(v) if isinstance(v, list) else v for k, v in params.items()}
            for name in names:
                rows = conn.execute("EXPLAIN QUERY PLAN " + q[name], p).fetchall()
                out[name] = [str(r[-1]) for r in rows]
        finally:
            conn.close()
        return out
    import psycopg

    q = sql_files.queries("postgres")
    with psycopg.connect(url) as conn:
        for name in names:
            with conn.transaction(force_rollback=True):
                rows = conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + q[name],
                                    params).fetchall()
            out[name] = [str(r[0]) for r in rows]
    return out


# -- DBOS ----------------------------------------------------------------------------------
def measure_dbos(db: str, size: int, args: argparse.Namespace, scratch: Path,
                 log: Any) -> dict[str, Any]:
    with runner.fresh_database(db, scratch) as url:
        log(f"DBOS {db} {size:,}: seeding")
        seed = runner.run(DBOS, {"workload": "scale_seed", "url": url, "size": size},
                          timeout=7200)
        # Each process its own executor id: one launching recovers only its own.
        workers = [runner.Child(DBOS, {"workload": "scale_worker", "url": url,
                                       "concurrency": CONCURRENCY,
                                       "per_process": PER_PROCESS},
                                env={"DBOS__VMID": f"bench-{i}"})
                   for i in range(args.workers)]
        try:
            for w in workers:
                w.wait_for("READY", 120)
            out = runner.run(DBOS, {"workload": "scale_enqueue", "url": url,
                                    "runs": args.runs}, timeout=1800)
            for w in workers:
                w.send_line()
            for w in workers:
                w.finish(120)
        finally:
            for w in workers:
                w.kill()
    log(f"  DBOS: seeded in {seed['seconds']:.0f} s; "
        f"{args.runs / out['enqueue_seconds']:.0f} enqueues/s, "
        f"{args.runs / out['seconds']:.0f} runs/s")
    return {"seed": seed, "starts_per_s": args.runs / out["enqueue_seconds"],
            "runs_per_s": args.runs / out["seconds"]}


# -- the report ------------------------------------------------------------------------------
def fmt(x: float, digits: int = 0) -> str:
    return "—" if x != x else (f"{x:,.0f}" if digits == 0 else f"{x:.{digits}f}")


def cell(found: dict[str, Any], key: str, digits: int) -> str:
    """`median (min-max)` where there were repetitions, else the one value."""
    values = found.get(key + "_all", [found[key]])
    if len(values) < 2:
        return fmt(found[key], digits)
    return f"{fmt(found[key], digits)} ({fmt(values[0], digits)}-{fmt(values[-1], digits)})"


ROWS = (  # key, label, digits, higher is better
    ("claim_p50", "claim latency p50 (ms, claims that took runs)", 1, False),
    ("claim_p99", "claim latency p99 (ms)", 1, False),
    ("wake_p50", "deliver → next step p50 (ms)", 1, False),
    ("wake_p99", "deliver → next step p99 (ms)", 1, False),
    ("runs_per_s", "runs/s executing started runs (3 steps each)", 0, True),
    ("starts_per_s", "starts/s with start_many (batches of 1,000)", 0, True),
    ("start_p50", "start latency p50 (ms, one `client.start` at a time)", 1, False),
    ("start_p99", "start latency p99 (ms)", 1, False),
    ("page_p50", "run page p50 (ms, `run_page` of a seeded run)", 1, False),
    ("page_p99", "run page p99 (ms)", 1, False),
)
EXTRA = (  # measured and merged like ROWS, reported in the notes under the table
    ("idle_p50", "", 1, False),
    ("wake_call_p50", "", 1, False), ("wake_call_p99", "", 1, False),
    ("wake_resume_p50", "", 1, False), ("wake_resume_p99", "", 1, False),
    ("prune_seconds", "", 1, False), ("prune_lock_ms", "", 1, False),
    ("prune_runs", "", 0, False),
)


def section(found: dict[str, Any], args: argparse.Namespace, seconds: float) -> str:
    small, large = args.sizes[0], args.sizes[-1]
    lines = [BEGIN, "## Scale run: queues, a million runs (issue 19)", "",
             f"Written by `python -m bench.scale` on "
             f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC in {seconds / 60:.1f} min; "
             "not part of CI nor of `python -m bench`. "
             f"Each database first holds N runs (90% finished, 10% waiting for an event), "
             "bulk-loaded on the server from rows stead itself made (one finished run and "
             "one waiting run, copied with new ids, journal and waits included); then "
             f"{args.workers} worker processes ({PER_PROCESS} slots each) serve one queue "
             f"(`app.queue(\"bench\", concurrency={CONCURRENCY})`): {args.runs:,} runs of 3 "
             f"steps started with `start_many`, then executed; then {args.approvals} approval "
             "runs taken to their waits and each delivered its event "
             f"{DELIVER_GAP * 1000:.0f} ms apart. Measured on a shared 2-core box "
             "(load: " + machine.load_now() + "); " + (
                 f"each cell is the median (min-max) of {args.repeat} repetitions, the "
                 "sizes taking turns, and each ratio is of the medians" + (
                     f"; a size over {RESEED_UP_TO:,} runs was seeded once and measured "
                     f"{args.repeat} times on that database (each measurement adding its "
                     f"{args.runs + args.approvals:,} runs), its retention after the last."
                     if args.seed_once else ".")
                 if args.repeat > 1 else "single measurements.") + (
                 " Each PostgreSQL seed ends with VACUUM ANALYZE, an SQLite one with ANALYZE" + (
                     "." if args.no_checkpoint else
                     "; the PostgreSQL one then with CHECKPOINT (see section 11)."))
             , ""]
    for db in args.db:
        label = {"postgres": "PostgreSQL", "sqlite": "SQLite"}[db]
        a, b = found.get(("stead", db, small)), found.get(("stead", db, large))
        if not a or not b:
            continue
        lines += [f"### {label}", "",
                  f"| metric | {small:,} runs | {large:,} runs | ratio | within 1.5x? |",
                  "|---|---|---|---|---|"]
        for key, name, digits, higher in ROWS:
            r = b[key] / a[key] if a[key] else float("nan")
            worse = 1 / r if higher else r
            ok = "yes" if worse <= 1.5 else f"**no** ({worse:.2f}x worse)"
            lines.append(f"| {name} | {cell(a, key, digits)} | {cell(b, key, digits)} | "
                         f"{r:.2f} | {ok} |")
        for key, what in (("starts_per_s", "starts/s (DBOS: `DBOSClient.enqueue`, one by one)"),
                          ("runs_per_s", "runs/s executing")):
            d_a, d_b = found.get(("dbos", db, small)), found.get(("dbos", db, large))
            if d_a and d_b:
                lines.append(f"| DBOS {what} | {fmt(d_a[key])} | {fmt(d_b[key])} | "
                             f"{d_b[key] / d_a[key]:.2f} | stead/DBOS at {large:,}: "
                             f"{b[key] / d_b[key]:.1f}x |")
        target = "met" if b["starts_per_s"] >= 2000 else "**missed**"
        lines += ["", f"- start_many at {large:,} runs: {fmt(b['starts_per_s'])} starts/s "
                  f"(target >= 2,000/s: {target}).",
                  f"- seeding {large:,} runs: {b['seed']['f_seconds'] + b['seed']['w_seconds']:.0f} s "
                  f"(+{b['seed']['analyze_seconds']:.0f} s ANALYZE), "
                  f"{b['seed']['bytes'] / 1e6:,.0f} MB in use after; runs by status before "
                  f"the measured ones: {json.dumps(b['seed']['statuses'])}.",
                  f"- while the approvals were delivered, the server's own writes at "
                  f"{small:,} and {large:,} runs (last repetition): "
                  f"{json.dumps(a.get('server_io', {}))} and "
                  f"{json.dumps(b.get('server_io', {}))}; each seed ends with "
                  + ("ANALYZE" if db == "sqlite" else "VACUUM ANALYZE")
                  + ("" if b["seed"].get("checkpoint_seconds") is None else
                               f" and a CHECKPOINT ({b['seed']['checkpoint_seconds']:.1f} s "
                               f"at {large:,} runs)") + ".",
                  *([] if db != "postgres" else [
                      f"- retention of the oldest seeded day (its runs all finished), "
                      f"`stead.prune` after the measurements: at {small:,} runs "
                      f"{fmt(a['prune_runs'])} runs deleted in {cell(a, 'prune_seconds', 1)} s, "
                      f"the day's partitions dropped in a transaction of "
                      f"{cell(a, 'prune_lock_ms', 1)} ms (its wait for the lock included); at "
                      f"{large:,} runs {fmt(b['prune_runs'])} runs in "
                      f"{cell(b, 'prune_seconds', 1)} s, the drop {cell(b, 'prune_lock_ms', 1)} "
                      "ms (target < 1 s of lock)."]),
                  f"- claims that found the queue empty: p50 {fmt(b['idle_p50'], 1)} ms "
                  f"({b['idle_claims']} of them) at {large:,} runs.",
                  "- deliver → next step, split into the delivery's own call (the event "
                  "committed) and the rest (the worker noticing, claiming, replaying and "
                  f"running the next step), p50 / p99 ms: at {small:,} runs "
                  f"{cell(a, 'wake_call_p50', 1)} / {cell(a, 'wake_call_p99', 1)} and "
                  f"{cell(a, 'wake_resume_p50', 1)} / {cell(a, 'wake_resume_p99', 1)}; "
                  f"at {large:,} runs {cell(b, 'wake_call_p50', 1)} / "
                  f"{cell(b, 'wake_call_p99', 1)} and {cell(b, 'wake_resume_p50', 1)} / "
                  f"{cell(b, 'wake_resume_p99', 1)}.", "",
                  f"Plans at {large:,} runs, with the {args.runs:,} started runs queued (the "
                  "queue's probe, counts and claim, and the plain claim):", "", "```"]
        for name, plan in b["plans"].items():
            lines += [f"-- {name}", *plan]
        lines += ["```", ""]
    lines.append(END)
    return "\n".join(lines)


def write(text: str, path: Path) -> None:
    runner.write_section(text, path, BEGIN, END)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale")
    p.add_argument("--sizes", default="1000,1000000",
                   type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--db", default="postgres,sqlite", type=lambda s: s.split(","))
    p.add_argument("--runs", type=int, default=2000)
    p.add_argument("--approvals", type=int, default=200)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--repeat", type=int, default=1,
                   help="take the sizes in turn this many times; report medians")
    p.add_argument("--days", type=int, default=10,
                   help="the days the seeded finished runs started over")
    p.add_argument("--no-dbos", action="store_true")
    p.add_argument("--no-checkpoint", action="store_true",
                   help="measure right after the bulk load, its WAL not yet checkpointed")
    p.add_argument("--seed-once", action="store_true",
                   help=f"seed each size over {RESEED_UP_TO:,} runs once and take its "
                        "--repeat measurements on that database (each adds "
                        "--runs + --approvals runs to it); smaller sizes are seeded afresh")
    p.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    args = p.parse_args(argv)

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    t0 = time.monotonic()
    reps: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    with runner.scratch_dir() as scratch, contextlib.ExitStack() as kept:
        for db in args.db:
            seeded: dict[int, tuple[str, dict[str, Any]]] = {}
            for size in args.sizes:
                if args.seed_once and size > RESEED_UP_TO:
                    url = kept.enter_context(runner.fresh_database(db, scratch))
                    seeded[size] = url, seed_stead(db, url, size, args, log)
            for rep in range(args.repeat):
                for size in args.sizes:
                    if args.repeat > 1:
                        log(f"repetition {rep + 1} of {args.repeat}")
                    if size in seeded:
                        url, seed = seeded[size]
                        log(f"stead {db} {size:,}: measuring the database seeded once")
                        one = measure_seeded(db, url, seed, args, log,
                                             prune=rep == args.repeat - 1)
                    else:
                        one = measure_stead(db, size, args, scratch, log)
                    reps.setdefault(("stead", db, size), []).append(one)
                    if not args.no_dbos and db == "postgres" and rep == 0:
                        # its seed is PostgreSQL SQL; one repetition: it is not the target
                        reps.setdefault(("dbos", db, size), []).append(
                            measure_dbos(db, size, args, scratch, log))
    found: dict[tuple[str, str, int], Any] = {
        k: merged(v) if k[0] == "stead" else v[0] for k, v in reps.items()}
    text = section(found, args, time.monotonic() - t0)
    print(text)
    raw = {f"{k[0]} {k[1]} {k[2]}": {kk: vv for kk, vv in v.items() if kk != "plans"}
           for k, v in found.items()}
    print(json.dumps(raw, indent=1, default=str), file=sys.stderr)
    if args.write:
        write(text, runner.BENCH / "RESULTS.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
