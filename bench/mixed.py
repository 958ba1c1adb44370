"""The mixed-load mode (`python -m bench --mixed`): the step, replay,
wake-up and takeover figures quiet and while a test-suite-like load shares
the machine, side by side in one run, with targets judged in every
repetition.

The load is what a laptop or a shared CI runner does while stead runs beside
it: per core, one process that alternates a CPU burst of Python, a batch of
small files each written and fsynced, a SQLite transaction in WAL with
`synchronous=FULL`, and (every few rounds) a fresh Python interpreter that
imports a few modules and exits. It is the same sequence each time, so a run
repeats; the load average is recorded at the start and end of each half of
each repetition, because the machine may be shared with other work too.

Quiet and mixed take turns within each of the three repetitions, so drift
hits both alike. The section it writes goes between the markers below in
bench/RESULTS.md."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import machine, runner, workloads
from bench.workloads import PG, SQLITE, Context

BEGIN, END = "<!-- mixed: begin -->", "<!-- mixed: end -->"
LOADS = ("quiet", "mixed")
BASE = "stead_base"  # stead at the baseline's source (`--baseline`)

# One load process: CPU, fsync and process churn, in a fixed order, until its
# parent (the bench) is gone, so a bench killed outright leaves nothing behind.
_LOAD = r"""
import os, sqlite3, subprocess, sys, tempfile
parent, seed = int(sys.argv[1]), int(sys.argv[2])
folder = tempfile.mkdtemp(prefix="stead-bench-load-")
db = sqlite3.connect(os.path.join(folder, "load.db"), isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=FULL")
db.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v BLOB)")
block = bytes(range(256)) * 16
rounds = 0
try:
    while os.getppid() == parent:
        rounds += 1
        total = 0
        for i in range(300_000):          # ~30-60 ms of interpreter work
            total += (i * seed) % 7
        for i in range(8):                 # small files, each fsynced
            path = os.path.join(folder, f"f{i}")
            with open(path, "wb") as f:
                f.write(block)
                f.flush()
                os.fsync(f.fileno())
        db.execute("BEGIN IMMEDIATE")     # a durable transaction of 50 rows
        db.executemany("INSERT OR REPLACE INTO t VALUES (?, ?)",
                       [((rounds * 50 + j) % 5000, block[:512]) for j in range(50)])
        db.execute("COMMIT")
        if rounds % 5 == 0:               # a fresh interpreter, as a test run starts many
            subprocess.run([sys.executable, "-c", "import json, sqlite3, asyncio, email"],
                           check=False)
finally:
    db.close()
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))
    os.rmdir(folder)
"""


@contextlib.contextmanager
def mixed_load(count: int) -> Iterator[None]:
    """`count` test-suite-like load processes while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", _LOAD, str(os.getpid()), str(i + 3)])
             for i in range(count)]
    try:
        time.sleep(1.0 if procs else 0)  # let the load reach the CPU and the disk
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclasses.dataclass
class Sizes:
    steps: int
    replay_steps: int
    waiting_runs: int
    deliveries: int


def sizes(quick: bool) -> Sizes:
    if quick:
        return Sizes(steps=300, replay_steps=1000, waiting_runs=200, deliveries=40)
    return Sizes(steps=1000, replay_steps=1000, waiting_runs=500, deliveries=100)


# A row: (label, unit, better) -> {system: value} for one (rep, load, db).
Found = dict[tuple[int, str, str, str], dict[str, float]]


def _one(ctx: Context, db: str, size: Sizes, peers: list[str],
         log: Callable[[str], None]) -> dict[str, dict[str, float]]:
    """Every row once, for one database and one load; stead's rows also
    with the baseline's source when there is one, the two taking turns."""
    rows: dict[str, dict[str, float]] = {}
    steads = ["stead", BASE] if BASE in ctx.systems else ["stead"]
    sync = rows.setdefault("sync step (µs)", {})
    for key in [*steads, *peers]:
        out = ctx.run(key, db, workload="seq", n=size.steps)
        sync[key] = out["seconds"] / size.steps * 1e6
    waits: dict[str, dict[str, Any]] = {}
    for key in steads:
        # The workloads below know stead by its key: the baseline stands in for it.
        as_stead = dataclasses.replace(ctx, systems={**ctx.systems, "stead": ctx.systems[key]})
        parts = as_stead.run("stead", db, workload="seq_parts", n=size.steps)
        rows.setdefault("async step (µs)", {})[key] = float(parts["async_step_us"])
        replay = workloads._recover_once(as_stead, "stead", db, size.replay_steps)
        rows.setdefault("replay of 1,000 steps (ms)", {})[key] = replay["replay"] * 1000
        takeover = workloads._recover_once(as_stead, "stead", db, size.replay_steps,
                                           lease=workloads.DEFAULT_LEASE)
        rows.setdefault("SIGKILL → first live step, default lease (s)", {})[key] = \
            takeover["takeover"]
        waits[key] = workloads._waits_stead(as_stead, db, size.waiting_runs, size.deliveries)
    if "langgraph" in peers:
        waits["langgraph"] = workloads._waits_langgraph(ctx, db, size.waiting_runs,
                                                        size.deliveries)
    rows["deliver → next step, p50 (ms)"] = {k: v["p50"] for k, v in waits.items()}
    rows["deliver → next step, p99 (ms)"] = {k: v["p99"] for k, v in waits.items()}
    log("    " + "; ".join(f"{label}: " + ", ".join(f"{k} {v:,.1f}" for k, v in vals.items())
                           for label, vals in rows.items()))
    return rows


def _baseline_system(baseline: Path, scratch: Path) -> runner.System:
    """stead's workload scripts (this tree's bench) run on the baseline
    checkout's source, in this tree's interpreter."""
    src = baseline.resolve() / "src"
    if not (src / "stead").is_dir():
        raise runner.BenchError(f"no stead source at {src}")
    wrapper = scratch / "python-baseline"
    wrapper.write_text("#!/bin/sh\n"
                       f'PYTHONPATH="{src}${{PYTHONPATH:+:$PYTHONPATH}}" '
                       f'exec "{runner.project_python()}" "$@"\n')
    wrapper.chmod(0o755)
    subprocess.run([str(wrapper), "-m", "compileall", "-q", "-j", "0", str(src)],
                   check=True, capture_output=True)
    return runner.System(BASE, "stead before", "bench.w_stead", str(wrapper))


def measure(dbs: list[str], reps: int, quick: bool, peers: list[str],
            log: Callable[[str], None], baseline: Path | None = None) -> dict[str, Any]:
    systems = runner.systems()
    cores = os.cpu_count() or 1
    size = sizes(quick)
    found: Found = {}
    loads: dict[tuple[int, str], tuple[str, str]] = {}
    with runner.scratch_dir() as scratch:
        if baseline is not None:
            systems[BASE] = _baseline_system(baseline, scratch)
        ctx = Context(dbs=dbs, systems=systems, peers=peers, quick=quick,
                      scratch=scratch, log=log)
        for rep in range(reps):
            for load in LOADS:
                with mixed_load(cores if load == "mixed" else 0):
                    before = machine.load_now()
                    for db in dbs:
                        log(f"  mixed rep {rep + 1}/{reps} {load} {db}")
                        for label, vals in _one(ctx, db, size, peers, log).items():
                            found[(rep, load, db, label)] = vals
                    loads[(rep, load)] = (before, machine.load_now())
    return {"found": found, "loads": loads, "reps": reps, "cores": cores,
            "size": dataclasses.asdict(size),
            "baseline": None if baseline is None else _rev(baseline)}


@dataclasses.dataclass
class Verdict:
    what: str
    db: str
    load: str
    values: list[str]  # one per repetition
    met: list[bool]


def _get(found: Found, rep: int, load: str, db: str, label: str, key: str) -> float | None:
    return (found.get((rep, load, db, label)) or {}).get(key)


def verdicts(result: dict[str, Any], dbs: list[str]) -> list[Verdict]:
    """Each target, judged in every repetition (issue: "met in every
    repetition"). A figure that is missing (a peer not installed) is not met."""
    found: Found = result["found"]
    reps = range(result["reps"])
    out: list[Verdict] = []

    def ratio(rep: int, load: str, db: str, label: str, peer: str) -> float | None:
        s = _get(found, rep, load, db, label, "stead")
        p = _get(found, rep, load, db, label, peer)
        return None if s is None or p is None or s == 0 else p / s

    def add(what: str, db: str, load: str, values: list[float | None], fmt: str,
            ok: Callable[[float], bool]) -> None:
        out.append(Verdict(what, db, load,
                           ["—" if v is None else fmt.format(v) for v in values],
                           [v is not None and ok(v) for v in values]))

    for db in dbs:
        for load, lg_x, dbos_x in (("quiet", 3.0, 5.0), ("mixed", 2.0, 4.0)):
            for label in ("sync step (µs)", "async step (µs)"):
                # The async step is stead's; the peers' figure is their (sync) step.
                for peer, times in (("langgraph", lg_x), ("dbos", dbos_x)):
                    vals = []
                    for rep in reps:
                        s = _get(found, rep, load, db, label, "stead")
                        p = _get(found, rep, load, db, "sync step (µs)", peer)
                        vals.append(None if s is None or p is None or s == 0 else p / s)
                    add(f"{label.split(' (')[0]}: stead ≥ {times:g}x faster than {peer}",
                        db, load, vals, "{:.2f}x", lambda v, t=times: v >= t)
        quiet = [_get(found, r, "quiet", db, "replay of 1,000 steps (ms)", "stead") for r in reps]
        mixed = [_get(found, r, "mixed", db, "replay of 1,000 steps (ms)", "stead") for r in reps]
        add("replay of 1,000 steps: mixed within 3x of quiet", db, "mixed",
            [None if q is None or m is None or q == 0 else m / q
             for q, m in zip(quiet, mixed, strict=True)],
            "{:.2f}x", lambda v: v <= 3.0)
        for pct in ("p50", "p99"):
            label = f"deliver → next step, {pct} (ms)"
            add(f"deliver → next step {pct}: stead ≤ LangGraph", db, "mixed",
                [ratio(r, "mixed", db, label, "langgraph") for r in reps],
                "{:.2f}x", lambda v: v >= 1.0)
        add("SIGKILL → first live step ≤ 2 s, default settings", db, "mixed",
            [_get(found, r, "mixed", db, "SIGKILL → first live step, default lease (s)",
                  "stead") for r in reps], "{:.2f} s", lambda v: v <= 2.0)
    return out


def _db_name(db: str) -> str:
    return "SQLite" if db == SQLITE else "PostgreSQL"


def section(result: dict[str, Any], dbs: list[str], argv: str, started: str,
            minutes: float) -> str:
    found: Found = result["found"]
    reps = result["reps"]
    systems: tuple[str, ...] = ("stead", "langgraph", "dbos")
    if result.get("baseline"):
        systems = ("stead", BASE, "langgraph", "dbos")
    out = [BEGIN, "## Mixed load: quiet and beside a test-suite-like load, one run (issue 40)", "",
           f"Written by `{argv}` on {started} in {minutes:.1f} min, at "
           f"{runner_rev()}. *Mixed* is the same workload while {result['cores']} load "
           "processes (one per core: a CPU burst of Python, 8 small files written and "
           "fsynced, a 50-row SQLite transaction in WAL + FULL, and every fifth round a "
           "fresh interpreter) run beside it; quiet and mixed take turns within each of "
           f"the {reps} repetitions. Sizes: {result['size']}. Load average (1, 5, 15 min) "
           "at the start and end of each half:", ""]
    for (rep, load), (before, after) in sorted(result["loads"].items()):
        out.append(f"- repetition {rep + 1}, {load}: {before} → {after}")
    names = {BASE: f"stead before ({result.get('baseline')})"}
    out += ["", "Figures per repetition (`r1 / r2 / r3`)"
            + (f"; *stead before* is the same workloads on the source at {result['baseline']}, "
               "taking turns with stead's in each cell" if result.get("baseline") else "")
            + ":", "",
            "| figure | db | load | " + " | ".join(names.get(s, s) for s in systems) + " |",
            "|---|---|---|" + "---|" * len(systems)]
    labels = list(dict.fromkeys(k[3] for k in found))
    for label in labels:
        for db in dbs:
            for load in LOADS:
                cells = []
                for key in systems:
                    vals = [_get(found, r, load, db, label, key) for r in range(reps)]
                    cells.append(" / ".join("—" if v is None else f"{v:,.1f}" for v in vals)
                                 if any(v is not None for v in vals) else "—")
                out.append(f"| {label} | {_db_name(db)} | {load} | " + " | ".join(cells) + " |")
    vs = verdicts(result, dbs)
    out += ["", "Targets, judged in every repetition (a ratio above 1 is stead ahead):", "",
            "| target | db | load | per repetition | met in every repetition |",
            "|---|---|---|---|---|"]
    for v in vs:
        out.append(f"| {v.what} | {_db_name(v.db)} | {v.load} | {' / '.join(v.values)} | "
                   f"{'yes' if all(v.met) else 'no (' + str(v.met.count(False)) + ' missed)'} |")
    out.append(END)
    return "\n".join(out)


def runner_rev() -> str:
    return _rev(runner.ROOT)


def _rev(tree: Path) -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree,
                          capture_output=True, text=True, check=False)
    return proc.stdout.strip() or "?"


def main(dbs: list[str], quick: bool, peers: bool, output: Path, argv: str,
         log: Callable[[str], None], baseline: str | None = None) -> int:
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    t0 = time.perf_counter()
    if PG in dbs and runner.pg_available():
        log(f"skipping PostgreSQL: {runner.pg_available()}")
        dbs = [d for d in dbs if d != PG]
    peer_keys = ["langgraph", "dbos"] if peers else []
    result = measure(dbs, 3, quick, peer_keys, log,
                     None if baseline is None else Path(baseline))
    text = section(result, dbs, argv, started, (time.perf_counter() - t0) / 60)
    runner.write_section(text, output, BEGIN, END)
    log(text)
    missed = [v for v in verdicts(result, dbs) if not all(v.met)]
    log(f"\n{len(missed)} target(s) missed in at least one repetition; wrote {output}")
    return 0
