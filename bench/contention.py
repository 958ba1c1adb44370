"""The contention profile (`python -m bench --contention`): the sequential
and many-runs workloads quiet and while CPU-bound processes, one per core,
share the machine, side by side in one run, as ratios; and where a sync
step's time goes under load (`seq_probe` in bench/w_stead.py).

Quiet and loaded take turns within each repetition, so drift on a box other
people share hits both alike. The section it writes goes between the
markers below in bench/RESULTS.md."""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import machine, runner
from bench.workloads import PG, SQLITE

BEGIN, END = "<!-- contention: begin -->", "<!-- contention: end -->"

# Spin, and look now and then whether the bench is still there, so a bench
# killed outright leaves no hog behind.
_HOG = (
    "import os, sys\n"
    "parent = int(sys.argv[1])\n"
    "while os.getppid() == parent:\n"
    "    for _ in range(1_000_000):\n"
    "        pass\n"
)
LOADS = ("quiet", "loaded")


@contextlib.contextmanager
def hogs(count: int) -> Iterator[None]:
    """`count` CPU-bound processes while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", _HOG, str(os.getpid())])
             for _ in range(count)]
    try:
        time.sleep(0.3 if procs else 0)  # let them reach the CPU
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


# (row label, system key, job, what to read from the result)
Row = tuple[str, str, dict[str, Any], Callable[[dict[str, Any]], float]]


def rows(quick: bool) -> list[Row]:
    n, runs = (300, 100) if quick else (1000, 300)

    def per_step(out: dict[str, Any]) -> float:
        return float(out["seconds"]) / n * 1e6

    def rate(out: dict[str, Any]) -> float:
        return runs / float(out["seconds"])

    return [
        (f"sequential, sync step function: µs per step ({n} steps)", "stead",
         {"workload": "seq", "n": n}, per_step),
        (f"sequential, sync step function: µs per step ({n} steps)", "langgraph",
         {"workload": "seq", "n": n}, per_step),
        (f"sequential, async step function: µs per step ({n} steps)", "stead",
         {"workload": "seq_parts", "n": n}, lambda out: float(out["async_step_us"])),
        (f"many small runs, concurrency=32: runs/s ({runs} runs x 3 steps)", "stead",
         {"workload": "many", "runs": runs, "concurrency": 32}, rate),
        (f"many small runs, concurrency=32: runs/s ({runs} runs x 3 steps)", "langgraph",
         {"workload": "many", "runs": runs, "concurrency": 32}, rate),
    ]


def measure(dbs: list[str], reps: int, quick: bool, peers: bool,
            log: Callable[[str], None]) -> dict[str, Any]:
    systems = runner.systems()
    cores = os.cpu_count() or 1
    found: dict[tuple[str, str, str, str], list[float]] = {}
    probes: dict[tuple[str, str], list[dict[str, Any]]] = {}
    todo = [r for r in rows(quick) if peers or r[1] == "stead"]
    with runner.scratch_dir() as scratch:
        for rep in range(reps):
            for load in LOADS:
                with hogs(cores if load == "loaded" else 0):
                    for db in dbs:
                        for label, key, job, read in todo:
                            system = systems[key]
                            with runner.fresh_database(db, scratch) as url:
                                out = runner.run(system, system.job(url=url, **job))
                            found.setdefault((db, label, key, load), []).append(read(out))
                        with runner.fresh_database(db, scratch) as url:
                            probe = runner.run(systems["stead"], systems["stead"].job(
                                url=url, workload="seq_probe", n=rows(quick)[0][2]["n"]))
                        probes.setdefault((db, load), []).append(probe)
                        log(f"  contention rep {rep + 1}/{reps} {load} {db}: " + ", ".join(
                            f"{k} {v[-1]:.0f}" for (d, lb, k, ld), v in found.items()
                            if d == db and ld == load and lb.startswith("sequential, sync")))
    return {"found": found, "probes": probes, "cores": cores, "reps": reps,
            "steps": rows(quick)[0][2]["n"],
            "labels": list(dict.fromkeys(r[0] for r in todo))}


def _med(xs: list[float] | None) -> float | None:
    return statistics.median(xs) if xs else None


def _cell(xs: list[float] | None) -> str:
    if not xs:
        return "—"
    med = statistics.median(xs)
    return f"{med:,.0f} ({min(xs):,.0f}-{max(xs):,.0f})" if len(xs) > 1 else f"{med:,.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def section(result: dict[str, Any], dbs: list[str], argv: str, started: str,
            minutes: float, load_before: str, load_after: str) -> str:
    found, probes = result["found"], result["probes"]
    out = [BEGIN, "## 9. contention profile (quiet and loaded, one run)", "",
           f"Written by `{argv}` on {started} in {minutes:.1f} min, at {machine_rev()}, "
           f"on the same machine (load average {load_before} when it began, {load_after} "
           "when it ended: other engineers' work shared its 2 cores throughout, in the "
           f"quiet columns too). *Loaded* is the same workload while {result['cores']} "
           "CPU-bound processes (one per core, a Python busy loop) run beside it; quiet "
           "and loaded take turns within each of the "
           f"{result['reps']} repetitions. Cells are `median (min-max)`; the ratios are "
           "of medians measured in this run.", "",
           "| workload | db | stead quiet | stead loaded | loaded/quiet | LangGraph quiet "
           "| LangGraph loaded | loaded/quiet | stead faster than LangGraph, loaded |",
           "|---|---|---|---|---|---|---|---|---|"]
    for label in result["labels"]:
        for db in dbs:
            s = [found.get((db, label, "stead", ld)) for ld in LOADS]
            g = [found.get((db, label, "langgraph", ld)) for ld in LOADS]
            sm, gm = [_med(x) for x in s], [_med(x) for x in g]
            # For a rate higher is better; for a time lower is.
            faster = _ratio(sm[1], gm[1]) if "runs/s" in label else _ratio(gm[1], sm[1])
            out.append(f"| {label} | {'SQLite' if db == SQLITE else 'PostgreSQL'} | "
                       f"{_cell(s[0])} | {_cell(s[1])} | {_ratio(sm[1], sm[0])} | "
                       f"{_cell(g[0])} | {_cell(g[1])} | {_ratio(gm[1], gm[0])} | "
                       f"{faster if faster == '—' else faster + 'x'} |")
    out += ["", "Where a sync step's time goes (`seq_probe`: the same sequential run, "
            "each step timed from the workflow's `await run.step` to the function "
            "running, and from there to the step back in the workflow with its record "
            "committed; context switches of every thread of the worker process over "
            "the run, per step, voluntary/involuntary; medians of the repetitions):", "",
            "| db | load | µs per step | await → function runs (µs) | function → step "
            "back, committed (µs) | calls run on the loop | switches per step, by thread |",
            "|---|---|---|---|---|---|---|"]
    for db in dbs:
        for load in LOADS:
            ps = probes.get((db, load)) or []
            if not ps:
                continue
            threads = sorted({k for p in ps for k in p["switches_per_step"]})
            sw = ", ".join(
                f"{t} {statistics.median(p['switches_per_step'].get(t, [0, 0])[0] for p in ps):.2f}"
                f"/{statistics.median(p['switches_per_step'].get(t, [0, 0])[1] for p in ps):.2f}"
                for t in threads)
            steps = result["steps"]
            out.append(
                f"| {'SQLite' if db == SQLITE else 'PostgreSQL'} | {load} | "
                f"{statistics.median(p['seconds'] for p in ps) / steps * 1e6:,.0f} | "
                f"{statistics.median(p['to_fn_us'] for p in ps):,.0f} | "
                f"{statistics.median(p['back_us'] for p in ps):,.0f} | "
                f"{statistics.median(p['inline_calls'] for p in ps):,.0f} of {steps} | {sw} |")
    out.append(END)
    return "\n".join(out)


def machine_rev() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=runner.ROOT,
                          capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain", "src"], cwd=runner.ROOT,
                           capture_output=True, text=True, check=False).stdout.strip()
    return proc.stdout.strip() + (" plus uncommitted changes to src" if dirty else "")


def write(text: str, path: Path) -> None:
    runner.write_section(text, path, BEGIN, END)


def main(dbs: list[str], quick: bool, peers: bool, output: Path, argv: str,
         log: Callable[[str], None]) -> int:
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    before = machine.load_now()
    t0 = time.perf_counter()
    if PG in dbs and runner.pg_available():
        dbs = [d for d in dbs if d != PG]
    result = measure(dbs, 1 if quick else 3, quick, peers, log)
    text = section(result, dbs, argv, started, (time.perf_counter() - t0) / 60,
                   _fmt_load(before), _fmt_load(machine.load_now()))
    log(text)
    write(text, output)
    log(f"\nwrote {output}")
    return 0


def _fmt_load(load: Any) -> str:
    if isinstance(load, (list, tuple)):
        return " / ".join(f"{x:.2f}" for x in load)
    return str(load)
