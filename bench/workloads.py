"""The workloads, each run for every system on every database, in the
same run. Each measurement gets a fresh database and fresh processes; the
systems take turns within each repetition so drift hits them alike."""

from __future__ import annotations

import dataclasses
import itertools
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import runner
from bench.runner import Child, System, fresh_database

SQLITE, PG = "sqlite", "postgres"


@dataclasses.dataclass
class Metric:
    workload: str
    db: str
    name: str
    better: str  # "lower" or "higher"
    samples: dict[str, list[float]]
    digits: int = 1
    no_ratio: tuple[str, ...] = ()  # peers for which a ratio would mislead

    def median(self, key: str) -> float | None:
        xs = self.samples.get(key) or []
        return statistics.median(xs) if xs else None


@dataclasses.dataclass
class Context:
    dbs: list[str]
    systems: dict[str, System]
    peers: list[str]  # peer keys available in this run (dbos, dbos_wal, langgraph)
    quick: bool
    scratch: Path
    log: Callable[[str], None]
    metrics: list[Metric] = dataclasses.field(default_factory=list)
    notes: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    reps_used: dict[str, str] = dataclasses.field(default_factory=dict)

    def contestants(self, db: str, *, wal_variant: bool = True) -> list[str]:
        keys = ["stead"] + [p for p in self.peers if wal_variant or p != "dbos_wal"]
        if db != SQLITE:
            keys = [k for k in keys if k != "dbos_wal"]  # WAL is a SQLite mode
        return keys

    def add(self, metric: Metric) -> None:
        self.metrics.append(metric)

    def note(self, workload: str, text: str) -> None:
        self.notes.setdefault(workload, []).append(text)

    def run(self, key: str, db: str, **job: Any) -> dict[str, Any]:
        system = self.systems[key]
        with fresh_database(db, self.scratch) as url:
            return runner.run(system, system.job(url=url, **job))


def _ms_intervals(times: list[float]) -> list[float]:
    return [(b - a) * 1000 for a, b in itertools.pairwise(times)]


# -- 1. sequential steps ----------------------------------------------------------------
def sequential(ctx: Context) -> None:
    n, reps = 1000, (1 if ctx.quick else 5)
    ctx.reps_used["sequential"] = f"{reps} (median of {reps})"
    for db in ctx.dbs:
        keys = [*ctx.contestants(db), "limit"]
        per_step: dict[str, list[float]] = {k: [] for k in keys}
        async_step: list[float] = []
        append: list[float] = []
        for rep in range(reps):
            for key in keys:
                out = ctx.run(key, db, workload="seq", n=n)
                per_step[key].append(out["seconds"] / n * 1e6)
            parts = ctx.run("stead", db, workload="seq_parts", n=n)
            async_step.append(parts["async_step_us"])
            append.append(parts["append_us"])
            ctx.log(f"  sequential/{db} rep {rep + 1}/{reps}: " + ", ".join(
                f"{k} {v[-1]:.0f} µs" for k, v in per_step.items()))
        w = "1. sequential steps (1 run x 1,000 steps)"
        ctx.add(Metric(w, db, "µs per step", "lower", per_step, 0))
        ctx.add(Metric(w, db, "stead, async step function (no thread hop): µs per step",
                       "lower", {"stead": async_step}, 0))
        ctx.add(Metric(w, db, "stead, bare store.append round trip (no workflow): µs",
                       "lower", {"stead": append}, 0))
        commits, statements = _count_commits(ctx, db, [k for k in keys if k != "limit"], n)
        ctx.add(Metric("1. sequential steps (1 run x 1,000 steps)", db,
                       "commits per step" if db == SQLITE else "transactions per step (server)",
                       "lower", commits, 2))
        if statements:
            ctx.add(Metric("1. sequential steps (1 run x 1,000 steps)", db,
                           "SQL statements per step", "lower", statements, 1))


def _count_commits(ctx: Context, db: str, keys: list[str],
                   n: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """SQLite: every sqlite3 connection traced in the process (a separate, untimed
    run). PostgreSQL: pg_stat_database.xact_commit of a fresh database after a
    run of n+1 steps minus one of 1 step."""
    commits: dict[str, list[float]] = {}
    statements: dict[str, list[float]] = {}
    for key in keys:
        system = ctx.systems[key]
        if db == SQLITE:
            out = ctx.run(key, db, workload="seq", n=n, count=True)
            commits[key] = [out["sqlite_commits"] / n]
            statements[key] = [out["sqlite_statements"] / n]
            continue
        counts = []
        for steps in (1, n + 1):
            with fresh_database(db, ctx.scratch) as url:
                runner.run(system, system.job(workload="seq", url=url, n=steps))
                counts.append(runner.pg_transactions(url))
        commits[key] = [(counts[1] - counts[0]) / n]
    return commits, statements


# -- 2. many small runs ----------------------------------------------------------------
DBOS_QUEUE_POLL = 0.01


def many(ctx: Context) -> None:
    runs = 200 if ctx.quick else 1000
    reps = 1 if ctx.quick else 3
    dbos_reps = 1
    ctx.reps_used["many"] = (f"{reps} for stead and LangGraph, {dbos_reps} for DBOS "
                             f"(a DBOS pass takes ~1 min); {runs} runs each")
    for db in ctx.dbs:
        keys = ctx.contestants(db, wal_variant=False)
        for conc in (1, 32):
            rate: dict[str, list[float]] = {k: [] for k in keys}
            for rep in range(reps):
                for key in keys:
                    if key.startswith("dbos") and rep >= dbos_reps:
                        continue
                    out = ctx.run(key, db, workload="many", runs=runs, concurrency=conc,
                                  poll=DBOS_QUEUE_POLL)
                    if out["completed"] != runs:
                        raise runner.BenchError(f"{key}: {out['completed']}/{runs} completed")
                    rate[key].append(runs / out["seconds"])
                    ctx.details.setdefault(f"many/{db}/c{conc}/{key}", []).append(out)
                ctx.log(f"  many/{db}/concurrency {conc} rep {rep + 1}/{reps}: " + ", ".join(
                    f"{k} {v[-1]:.0f} runs/s" for k, v in rate.items() if v))
            ctx.add(Metric(f"2. many small runs ({runs} runs x 3 steps)", db,
                           f"runs/s, concurrency={conc}", "higher", rate, 0))
            if conc == 32:
                # The worker's part alone, runs started beforehand. LangGraph has no
                # start (its figure is the same); DBOS executes while it enqueues, so
                # its phases do not split.
                executing = {k: [runs / o["exec_seconds"] for o in ctx.details[
                    f"many/{db}/c{conc}/{k}"]] for k in keys if not k.startswith("dbos")}
                ctx.add(Metric(f"2. many small runs ({runs} runs x 3 steps)", db,
                               f"runs/s executing started runs, concurrency={conc}",
                               "higher", executing, 0))


# -- 3. recovery -------------------------------------------------------------------------
STEAD_LEASE = 1.0
# The default lease, for the takeover row: the fresh worker must not wait it
# out, it sees the killed holder is gone (see stead/processes.py).
DEFAULT_LEASE = 30.0


def recovery(ctx: Context) -> None:
    n, reps = 1000, (1 if ctx.quick else 3)
    ctx.reps_used["recovery"] = f"{reps}"
    for db in ctx.dbs:
        keys = ctx.contestants(db, wal_variant=False)
        phases: dict[str, dict[str, list[float]]] = {
            p: {k: [] for k in keys} for p in ("replay", "total", "startup", "live")}
        for rep in range(reps):
            for key in keys:
                out = _recover_once(ctx, key, db, n)
                for p in phases:
                    phases[p][key].append(out[p])
            ctx.log(f"  recovery/{db} rep {rep + 1}/{reps}: " + ", ".join(
                f"{k} total {phases['total'][k][-1]:.2f} s, replay "
                f"{phases['replay'][k][-1] * 1000:.0f} ms" for k in keys))
        w = f"3. recovery ({n} journaled steps, SIGKILL, fresh process)"
        to_ms = {k: [x * 1000 for x in v] for k, v in phases["replay"].items()}
        ctx.add(Metric(w, db, "replay: workflow entry → first live step (ms)", "lower",
                       to_ms, 0, no_ratio=("langgraph",)))
        ctx.add(Metric(w, db, "start-up: spawn → imports done, store open (s)", "lower",
                       phases["startup"], 2))
        ctx.add(Metric(w, db, "spawn → first live step (s)", "lower", phases["live"], 2))
        ctx.add(Metric(w, db, "spawn → result (s)", "lower", phases["total"], 2))
        takeovers = [_recover_once(ctx, "stead", db, n, lease=DEFAULT_LEASE)["takeover"]
                     for _ in range(reps)]
        ctx.log(f"  recovery/{db} takeover with the default lease: "
                + ", ".join(f"{t:.2f} s" for t in takeovers))
        ctx.add(Metric(w, db, "SIGKILL → first live step, default 30 s lease (s)", "lower",
                       {"stead": takeovers}, 2))


def _recover_once(ctx: Context, key: str, db: str, n: int,
                  lease: float = STEAD_LEASE) -> dict[str, float]:
    """One recovery. With the short lease the fresh process starts once it
    has run out (start-up and replay timed alone); with a long one at once
    (`takeover` then times the kill to the first live step)."""
    system = ctx.systems[key]
    with fresh_database(db, ctx.scratch) as url:
        first = Child(system, system.job(workload="recover_prepare", url=url, n=n,
                                         lease_seconds=lease), env={"BENCH_HANG": "1"})
        try:
            run_id = first.wait_for("RUN", 120)[0]["run_id"]
            first.wait_for("READY", 300)
        finally:
            killed = time.perf_counter()  # the clock of Child.spawned_at and common.now
            first.kill()
        if key == "stead" and lease == STEAD_LEASE:
            # The dead worker's lease runs out before the fresh process starts, so
            # start-up and replay are timed alone (DBOS recovers its own
            # executor's workflows at launch at once).
            time.sleep(STEAD_LEASE + 0.2)
        fresh = Child(system, system.job(workload="recover", url=url, n=n, run_id=run_id))
        t0 = fresh.spawned_at
        out = fresh.finish(300)
    if out.get("result") != n:
        raise runner.BenchError(f"{key} recovery ended with {out}")
    return {
        "startup": out["t_ready"] - t0,
        "replay": out["t_live"] - out["t_entry"],
        "live": out["t_live"] - t0,
        "total": out["t_done"] - t0,
        "takeover": out["t_live"] - killed,
    }


# -- 4. growth ---------------------------------------------------------------------------
def growth(ctx: Context) -> None:
    n = 300 if ctx.quick else 1000
    reps = 1
    ctx.reps_used["growth"] = "1 (sizes are deterministic; latencies are means over 100 steps)"
    for db in ctx.dbs:
        keys = ctx.contestants(db, wal_variant=False)
        size: dict[str, list[float]] = {k: [] for k in keys}
        first: dict[str, list[float]] = {k: [] for k in keys}
        last: dict[str, list[float]] = {k: [] for k in keys}
        for _ in range(reps):
            for key in keys:
                out = ctx.run(key, db, workload="growth", n=n)
                gaps = _ms_intervals(out["step_times"])
                size[key].append(out["bytes"] / n)
                first[key].append(statistics.fmean(gaps[:100]))
                last[key].append(statistics.fmean(gaps[-100:]))
        # stead with the message not fed back to the next call: the storage path alone
        out = ctx.run("stead", db, workload="growth", n=n, feed=False)
        gaps = _ms_intervals(out["step_times"])
        ctx.details[f"growth/{db}/stead-nofeed"] = {
            "bytes_per_step": out["bytes"] / n, "first_ms": statistics.fmean(gaps[:100]),
            "last_ms": statistics.fmean(gaps[-100:])}
        ctx.log(f"  growth/{db}: " + ", ".join(
            f"{k} {size[k][-1]:.0f} B/step, {first[k][-1]:.2f}→{last[k][-1]:.2f} ms"
            for k in keys))
        w = f"4. growth (1 KB message per step, {n} steps)"
        ctx.add(Metric(w, db, "bytes stored per step", "lower", size, 0))
        ctx.add(Metric(w, db, "first 100 steps (ms/step)", "lower", first, 2))
        ctx.add(Metric(w, db, "last 100 steps (ms/step)", "lower", last, 2))


# -- 5. waits ----------------------------------------------------------------------------
def waits(ctx: Context) -> None:
    runs = 1000 if ctx.quick else 10_000
    peer_runs = 200 if ctx.quick else 1000
    deliveries = 50 if ctx.quick else 200
    peer_deliveries = 30 if ctx.quick else 100
    ctx.reps_used["waits"] = (f"1: stead {runs:,} waiting runs and {deliveries} deliveries; "
                              f"peers {peer_runs:,} and {peer_deliveries} (starting 10,000 "
                              "DBOS workflows takes minutes)")
    w = f"5. waits (stead {runs:,} waiting runs, peers {peer_runs:,})"
    for db in ctx.dbs:
        found = {"stead": _waits_stead(ctx, db, runs, deliveries)}
        if "dbos" in ctx.peers:
            found["dbos"] = _waits_dbos(ctx, db, peer_runs, peer_deliveries)
        if "langgraph" in ctx.peers:
            found["langgraph"] = _waits_langgraph(ctx, db, peer_runs, peer_deliveries)
        for key, out in found.items():
            ctx.details[f"waits/{db}/{key}"] = {k: v for k, v in out.items()
                                                if k != "latencies"}
        ctx.log(f"  waits/{db}: " + ", ".join(
            f"{k} p50 {v['p50']:.0f} ms, p99 {v['p99']:.0f} ms" for k, v in found.items()))
        for name, field, better, digits, comparable in (
            ("start + take to the wait: runs/s", "suspend_rate", "higher", 0, True),
            ("stored bytes per waiting run", "bytes_per_run", "lower", 0, True),
            ("RSS of the process that must stay up while they wait (MB)", "holder_rss_mb",
             "lower", 1, False),
            ("RSS of the process that took them to their waits (MB)", "setup_rss_mb",
             "lower", 1, False),
            ("deliver → next step, p50 (ms)", "p50", "lower", 1, True),
            ("deliver → next step, p99 (ms)", "p99", "lower", 1, True),
        ):
            samples = {k: [v[field]] for k, v in found.items() if v.get(field) is not None}
            ctx.add(Metric(w, db, name, better, samples, digits,
                           no_ratio=() if comparable else ("dbos", "langgraph")))
        # stead's client and worker in one process, beside LangGraph's own resume
        # (which is in-process: the deliverer's `invoke`).
        for name, field in (("deliver → next step, client and worker in one process, "
                             "p50 (ms)", "inproc_p50"),
                            ("deliver → next step, client and worker in one process, "
                             "p99 (ms)", "inproc_p99")):
            samples = {"stead": [found["stead"][field]]}
            if "langgraph" in found:
                samples["langgraph"] = [found["langgraph"][field.replace("inproc_", "")]]
            ctx.add(Metric(w, db, name, "lower", samples, 1))


def _latencies(chosen: list[str], sent: dict[str, float], woke: dict[str, float],
               ) -> dict[str, Any]:
    lat = sorted((woke[r] - sent[r]) * 1000 for r in chosen)
    return {"p50": _pct(lat, 50), "p99": _pct(lat, 99), "max": lat[-1], "latencies": lat}


def _plan(ids: list[str], deliveries: int, seed: int) -> tuple[list[str], list[float]]:
    """A random sample of the waiting runs, and random gaps between deliveries
    (mean 25 ms: not in step with any polling)."""
    rng = random.Random(seed)
    chosen = rng.sample(ids, deliveries)
    return chosen, [rng.expovariate(1 / 0.025) for _ in chosen]


def _waits_stead(ctx: Context, db: str, runs: int, deliveries: int,
                 poll_only: bool = False) -> dict[str, Any]:
    system = ctx.systems["stead"]
    with fresh_database(db, ctx.scratch) as url:
        setup = runner.run(system, system.job(workload="waits_setup", url=url, runs=runs),
                           timeout=1800)
        if setup["waiting"] != runs:
            raise runner.BenchError(f"only {setup['waiting']}/{runs} runs are waiting")
        worker = Child(system, system.job(workload="waits_worker", url=url,
                                          poll_only=poll_only))
        try:
            pid = worker.wait_for("IDLE", 60)[0]["pid"]
            time.sleep(2.0)  # let it settle into its idle loop
            rss_idle = _rss(pid)
            chosen, gaps = _plan(setup["run_ids"], deliveries, 7)
            delivered = runner.run(system, system.job(workload="deliver", url=url,
                                                      run_ids=chosen, gaps=gaps))
            sent = delivered["sent"]
            lines = worker.wait_for("WOKE", 120, deliveries)
            woke = {p["run_id"]: p["at"] for p in lines}
            rss_after = _rss(pid)
            worker.send_line()
            worker.finish(60)
        finally:
            worker.kill()
        # The same, with the client and the worker in one process (other runs).
        rest = [r for r in setup["run_ids"] if r not in set(chosen)]
        near, near_gaps = _plan(rest, min(deliveries, len(rest)), 8)
        inproc = runner.run(system, system.job(workload="waits_inproc", url=url,
                                               run_ids=near, gaps=near_gaps))
        near_lat = sorted(inproc["latencies"])
    noticed = {p["run_id"]: p["noticed"] for p in lines}
    parts = {  # a wake-up's parts, in ms: the delivery's call, noticing it, resuming
        "deliver_call_p50": _pct(sorted(
            (delivered["returned"][r] - sent[r]) * 1000 for r in chosen), 50),
        "notice_p50": _pct(sorted((noticed[r] - delivered["returned"][r]) * 1000
                                  for r in chosen if noticed[r]), 50),
        "resume_p50": _pct(sorted((woke[r] - noticed[r]) * 1000
                                  for r in chosen if noticed[r]), 50),
    }
    return {
        **parts,
        "runs": runs,
        "suspend_rate": runs / (setup["start_seconds"] + setup["suspend_seconds"]),
        "start_seconds": setup["start_seconds"], "suspend_seconds": setup["suspend_seconds"],
        "bytes_per_run": setup["bytes"] / runs,
        "holder_rss_mb": rss_idle / 2**20, "holder_rss_after_mb": rss_after / 2**20,
        "setup_rss_mb": setup["rss"] / 2**20,
        "inproc_p50": _pct(near_lat, 50), "inproc_p99": _pct(near_lat, 99),
        **_latencies(chosen, sent, woke),
    }


def _waits_dbos(ctx: Context, db: str, runs: int, deliveries: int) -> dict[str, Any]:
    """DBOS keeps each waiting workflow running (an async `recv`) in the process
    that started it; that process stays up, and messages are sent by a client."""
    system = ctx.systems["dbos"]
    with fresh_database(db, ctx.scratch) as url:
        host = Child(system, system.job(workload="waits_host", url=url, runs=runs))
        try:
            setup = host.wait_for("SETUP", 1800)[0]
            pid = host.wait_for("IDLE", 60)[0]["pid"]
            time.sleep(2.0)
            rss_idle = _rss(pid)
            chosen, gaps = _plan(setup["run_ids"], deliveries, 7)
            sent = runner.run(system, system.job(workload="deliver", url=url,
                                                 run_ids=chosen, gaps=gaps))["sent"]
            woke = {p["run_id"]: p["at"] for p in host.wait_for("WOKE", 120, deliveries)}
            rss_after = _rss(pid)
            host.send_line()
            host.finish(60)
        finally:
            host.kill()
    return {
        "runs": runs,
        "suspend_rate": runs / (setup["start_seconds"] + setup["suspend_seconds"]),
        "start_seconds": setup["start_seconds"], "suspend_seconds": setup["suspend_seconds"],
        "bytes_per_run": setup["bytes"] / runs,
        "holder_rss_mb": rss_idle / 2**20, "holder_rss_after_mb": rss_after / 2**20,
        "setup_rss_mb": setup["rss"] / 2**20,
        **_latencies(chosen, sent, woke),
    }


def _waits_langgraph(ctx: Context, db: str, runs: int, deliveries: int) -> dict[str, Any]:
    """A LangGraph thread waits as a checkpoint (`interrupt()`); nothing stays
    up, and the deliverer's own `invoke(Command(resume=...))` runs the rest."""
    system = ctx.systems["langgraph"]
    with fresh_database(db, ctx.scratch) as url:
        setup = runner.run(system, system.job(workload="waits_setup", url=url, runs=runs),
                           timeout=1800)
        chosen, gaps = _plan(setup["run_ids"], deliveries, 7)
        out = runner.run(system, system.job(workload="deliver", url=url, run_ids=chosen,
                                            gaps=gaps))
    return {
        "runs": runs,
        "suspend_rate": runs / (setup["start_seconds"] + setup["suspend_seconds"]),
        "start_seconds": setup["start_seconds"], "suspend_seconds": setup["suspend_seconds"],
        "bytes_per_run": setup["bytes"] / runs,
        "holder_rss_mb": None, "setup_rss_mb": setup["rss"] / 2**20,
        **_latencies(chosen, out["sent"], out["woke"]),
    }


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _pct(sorted_xs: list[float], p: float) -> float:
    if not sorted_xs:
        return float("nan")
    k = (len(sorted_xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (k - lo)


WORKLOADS: dict[str, Callable[[Context], None]] = {
    "sequential": sequential, "many": many, "recovery": recovery, "growth": growth,
    "waits": waits,
}


# -- 6. workspace snapshots (stead alone) ---------------------------------------------------
def workspace(ctx: Context) -> None:
    mb, files, reps = (50, 50, 1) if ctx.quick else (200, 200, 3)
    ctx.reps_used["workspace"] = f"{reps} (median of {reps})"
    system = runner.System("stead", "stead", "bench.w_workspace", runner.project_python())
    w = f"6. workspace snapshot ({mb} MB tree, {files} files)"
    for db in ctx.dbs:
        found: dict[str, list[float]] = {}
        for rep in range(reps):
            with fresh_database(db, ctx.scratch) as url:
                out = runner.run(system, system.job(url=url, mb=mb, files=files,
                                                    scratch=str(ctx.scratch)))
            if not out["restored_equal"]:
                raise runner.BenchError("the restored tree does not hash as saved")
            for key in ("first_seconds", "second_seconds", "restore_seconds"):
                found.setdefault(key, []).append(out[key])
            for key in ("first_stored", "second_stored", "db_growth"):
                found.setdefault(key, []).append(out[key] / 2**20)
            ctx.log(f"  workspace/{db} rep {rep + 1}/{reps}: save {out['first_seconds']:.2f} s, "
                    f"restore {out['restore_seconds']:.2f} s")
        for key, name, digits in (
            ("first_seconds", "first save: scan, hash, store (s)", 2),
            ("first_stored", "blob bytes stored by the first save (MB)", 1),
            ("db_growth", "database growth, both saves (MB)", 1),
            ("second_seconds", "second save, one file changed (s)", 2),
            ("second_stored", "blob bytes stored by the second save (MB)", 2),
            ("restore_seconds", "restore into a fresh directory, hash-checked (s)", 2),
        ):
            ctx.add(Metric(w, db, name, "lower", {"stead": found[key]}, digits))


WORKLOADS["workspace"] = workspace
