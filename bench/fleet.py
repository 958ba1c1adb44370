"""The many-workers mode (`python -m bench --fleet`, or `python -m bench.fleet
[--quick] [--reps N] [--write]`): stead on one PostgreSQL with many workers.

- **8 x 32.** Eight worker processes of concurrency 32 drain a backlog of
  runs of 3 steps (small JSON payloads, bench/w_fleet.py): runs/s and steps/s
  from the first worker's start to the last run's end, each worker's share of
  the runs claimed (min/max and Jain's index), leases renewed per second (the
  `stead.lease.renewals` counter), each live step's latency as the workflow
  sees it (call to durable return; p50/p99), and the CPU of the database's
  backends beside the workers'.
- **Recovery.** The same fleet; once a third of the runs are done, one worker
  is stopped (SIGSTOP), the runs it holds read from the database, and it is
  SIGKILLed: the time from the SIGKILL to another worker's first live step on
  one of them (and on the last of them).
- **Fleet sweep.** 8, 25, 50 and 100 workers, asyncio Workers spread over 4
  processes (each its own worker id, lease keeper, renewal connection and
  presence lock; each process's workers share its store's pool and LISTEN
  connection), concurrency 4 each, on a backlog that outlasts the window:
  over a steady window, claims/s, runs/s, leases renewed/s, claim latency
  p50/p99, transactions/s, the most connections to the database at once, and
  the CPU of its backends and of the workers.

Each figure is the median of the repetitions (3; `--quick`: 1 and smaller
loads), each on a fresh database; the load average is recorded per
repetition, since the box is shared. The section it writes goes between the
markers below in bench/RESULTS.md."""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench import common, machine, runner

SYSTEM = runner.System("stead", "stead", "bench.w_fleet", runner.project_python())
BEGIN, END = "<!-- fleet: begin -->", "<!-- fleet: end -->"
STEPS = 3
CORES = os.cpu_count() or 1
TICKS = os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass(frozen=True)
class Sizes:
    processes: int  # worker processes draining the backlog (8)
    concurrency: int  # each one's (32)
    runs: int  # their backlog
    recovery_runs: int
    fleet: tuple[int, ...]  # workers in the sweep
    fleet_processes: int
    fleet_concurrency: int
    # Seconds before the sweep's window: longer than a heartbeat (10 s), after which
    # each worker knows how many others are live (see stead/worker/leases.py).
    warmup: float
    window: float
    backlog_rate: int  # runs/s the sweep's backlog is sized for
    reps: int


FULL = Sizes(processes=8, concurrency=32, runs=6000, recovery_runs=3000,
             fleet=(8, 25, 50, 100), fleet_processes=4, fleet_concurrency=4, warmup=11.0,
             window=15.0, backlog_rate=600, reps=3)
QUICK = Sizes(processes=8, concurrency=32, runs=2000, recovery_runs=1500,
              fleet=(8, 25, 50, 100), fleet_processes=4, fleet_concurrency=4, warmup=11.0,
              window=6.0, backlog_rate=600, reps=1)


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def jain(xs: list[float]) -> float:
    """Jain's fairness index: 1 when all are equal, 1/n when one has all."""
    total, squares = sum(xs), sum(x * x for x in xs)
    return total * total / (len(xs) * squares) if squares else float("nan")


# -- what the database and the box did ------------------------------------------------------
def _admin(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _ticks(pid: int) -> int:
    """CPU ticks (user + system) of a process so far; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def _box_busy() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine so far."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


class Watch:
    """Samples, every quarter second, the connections to the bench's database
    and the CPU of their backends (a backend that left meanwhile keeps what
    it was last seen using)."""

    def __init__(self, url: str) -> None:
        self.name = url.rpartition("/")[2]
        self.conn = _admin(runner.PG_ADMIN)  # the sampling thread's
        self.ask = _admin(runner.PG_ADMIN)  # the caller's
        self.db = _admin(url)  # the caller's, on the bench's database
        self.most = 0
        self._first: dict[int, int] = {}  # backend pid -> its ticks when first seen
        self._last: dict[int, int] = {}
        self._from = self._first
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        rows = self.conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s",
                                 (self.name,)).fetchall()
        with self._lock:
            self.most = max(self.most, len(rows))
            for (pid,) in rows:
                ticks = _ticks(pid)
                self._first.setdefault(pid, ticks)
                self._last[pid] = ticks

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self._sample()

    def mark(self) -> None:
        """Count backend CPU from now on; the connection peak too."""
        self._sample()
        with self._lock:
            self._first = dict(self._last)
            self.most = 0

    def backend_seconds(self) -> float:
        self._sample()
        with self._lock:
            return sum(t - self._first.get(pid, 0) for pid, t in self._last.items()) / TICKS

    def transactions(self) -> int:
        self.ask.execute("SELECT pg_stat_clear_snapshot()")
        row = self.ask.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                                (self.name,)).fetchone()
        return int(row[0]) if row else 0

    def completed(self) -> int:
        row = self.db.execute("SELECT count(*) FROM runs WHERE status = 'completed'").fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in (self.conn, self.ask, self.db):
            conn.close()


# -- one load ------------------------------------------------------------------------------
@contextmanager
def fleet(url: str, counts: list[int], concurrency: int,
          intervals: dict[str, float] | None = None) -> Iterator[list[runner.Child]]:
    """A worker process for each of `counts`, of that many Workers, READY
    (`intervals`: the lease keeper's, changed for an experiment)."""
    children = []
    try:
        for p, count in enumerate(counts):
            ids = [f"w{p:02d}-{i:03d}" for i in range(count)]
            children.append(runner.Child(SYSTEM, {"workload": "workers", "url": url,
                                                  "ids": ids, "concurrency": concurrency,
                                                  "intervals": intervals or {}}))
        for child in children:
            child.wait_for("READY", 120)
        yield children
    finally:
        for child in children:
            child.close()


def _tell(children: list[runner.Child], line: str) -> None:
    for child in children:
        if child.proc.poll() is None:
            child.send_line(line)


def _results(children: list[runner.Child]) -> list[dict[str, Any]]:
    _tell(children, "stop")
    return [c.finish(300) for c in children if c.proc.returncode != -signal.SIGKILL]


def _until(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise runner.BenchError(f"bench.fleet: {what} not within {timeout:g} s")
        time.sleep(0.05)


def drain(url: str, runs: int, *, processes: int, concurrency: int,
          kill_at: float | None = None, timeout: float = 600) -> dict[str, Any]:
    """`processes` workers of `concurrency` drain `runs` runs; with `kill_at`,
    one is SIGKILLed once that share of the runs is done."""
    runner.run(SYSTEM, {"workload": "starts", "url": url, "runs": runs})
    watch = Watch(url)
    try:
        with fleet(url, [1] * processes, concurrency) as children:
            box0, load0 = _box_busy(), os.getloadavg()[0]
            watch.mark()
            go = common.now()
            _tell(children, "go")
            killed: dict[str, Any] = {}
            if kill_at is not None:
                _until("the kill point", lambda: watch.completed() >= kill_at * runs, timeout)
                killed = _kill(url, children[0])
            _until("every run completed", lambda: watch.completed() >= runs, timeout)
            backend, box1 = watch.backend_seconds(), _box_busy()
            found = _results(children)
            most = watch.most
    finally:
        watch.close()
    ends = [t for r in found for t in r["finished_at"]]
    seconds = max(ends) - go
    out: dict[str, Any] = {
        "runs_per_s": runs / seconds, "steps_per_s": runs * STEPS / seconds,
        "seconds": seconds, "load": load0, "connections": most,
        "step_ms": [ms for r in found for _, ms in r["steps"]],
        "pg_cores": backend / seconds,
        "worker_cores": sum(r["marks"][-1]["cpu"] - r["marks"][0]["cpu"] for r in found)
        / seconds,
        "box_cores": (box1[0] - box0[0]) / (box1[1] - box0[1]) * CORES,
        "renewed_per_s": sum(r["marks"][-1]["renewed"] - r["marks"][0]["renewed"]
                             for r in found) / seconds,
    }
    out["cpu_ms_per_run"] = (out["pg_cores"] + out["worker_cores"]) * seconds * 1000 / runs
    shares = [sum(n for _, _, n in claims) for r in found for claims in r["claims"].values()]
    out.update(claimed=shares, jain=jain(shares),
               min_share=min(shares) / sum(shares), max_share=max(shares) / sum(shares))
    if killed and not killed["held"]:  # it was between claims: nothing to take over
        out["recovery"] = {"held": 0, "first_s": float("nan"), "all_s": float("nan"),
                           "resumed": 0}
    elif killed:
        firsts = [r["first_live"][run_id] for r in found for run_id in killed["held"]
                  if run_id in r["first_live"]]
        out["recovery"] = {"held": len(killed["held"]),
                           "first_s": min(firsts) - killed["at"],
                           "all_s": max(firsts) - killed["at"],
                           "resumed": len(firsts)}
    return out


def _kill(url: str, child: runner.Child) -> dict[str, Any]:
    """Freeze the worker, read the runs it holds, SIGKILL it: when, and which."""
    os.kill(child.proc.pid, signal.SIGSTOP)
    with _admin(url) as conn:
        held = [r[0] for r in conn.execute(
            "SELECT run_id FROM runs WHERE status = 'running' AND lease_owner LIKE 'w00-%'"
        ).fetchall()]
    at = common.now()
    child.kill()
    return {"at": at, "held": held}


def steady(url: str, workers: int, sizes: Sizes, backlog: int,
           intervals: dict[str, float] | None = None) -> dict[str, Any]:
    """`workers` Workers over a few processes, on a backlog that outlasts the
    window: rates over the window, after a warm-up."""
    if backlog:
        runner.run(SYSTEM, {"workload": "starts", "url": url, "runs": backlog}, timeout=900)
    processes = min(sizes.fleet_processes, workers)
    counts = [workers // processes + (i < workers % processes) for i in range(processes)]
    watch = Watch(url)
    try:
        with fleet(url, counts, sizes.fleet_concurrency, intervals) as children:
            _tell(children, "go")
            time.sleep(sizes.warmup)
            box0, load0, tx0 = _box_busy(), os.getloadavg()[0], watch.transactions()
            watch.mark()
            _tell(children, "mark")
            time.sleep(sizes.window)
            backend, box1, tx1 = watch.backend_seconds(), _box_busy(), watch.transactions()
            most, left = watch.most, backlog - watch.completed()
            found = _results(children)
    finally:
        watch.close()
    window = sizes.window
    claims = []
    for r in found:
        start, stop = r["marks"][1]["at"], r["marks"][-1]["at"]
        claims += [(ms, n) for c in r["claims"].values() for at, ms, n in c if start <= at < stop]
    done = sum(1 for r in found for t in r["finished_at"]
               if r["marks"][1]["at"] <= t < r["marks"][-1]["at"])
    cells: dict[str, Any] = {
        "workers": sum(counts), "load": load0, "connections": most,
        "dry": left <= 0,  # the backlog ran out: the rates are a floor
        "claims_per_s": len(claims) / window,
        "fruitful_per_s": sum(1 for _, n in claims if n) / window,
        "claimed_per_s": sum(n for _, n in claims) / window,
        "claim_p50": pct([ms for ms, _ in claims], 0.5),
        "claim_p99": pct([ms for ms, _ in claims], 0.99),
        "runs_per_s": done / window,
        "renewed_per_s": sum(r["marks"][-1]["renewed"] - r["marks"][1]["renewed"]
                             for r in found) / window,
        "tx_per_s": (tx1 - tx0) / window,
        "pg_cores": backend / window,
        "worker_cores": sum(r["marks"][-1]["cpu"] - r["marks"][1]["cpu"] for r in found)
        / window,
        "box_cores": (box1[0] - box0[0]) / (box1[1] - box0[1]) * CORES,
    }
    cpu = (cells["pg_cores"] + cells["worker_cores"]) * window * 1000
    cells["cpu_ms_per_run"] = cpu / done if done else float("nan")
    return cells


# -- repetitions and the report ----------------------------------------------------------------
def measure(sizes: Sizes, log: Callable[[str], None]) -> dict[str, Any]:
    """Every load, `sizes.reps` times, taking turns within each repetition."""
    reps: list[dict[str, Any]] = []
    with runner.scratch_dir() as scratch:
        for rep in range(sizes.reps):
            found: dict[str, Any] = {"load": machine.load_now(), "sweep": {}}
            log(f"rep {rep + 1}/{sizes.reps} (load {found['load']}): "
                f"{sizes.processes} x {sizes.concurrency}")
            with runner.fresh_database("postgres", scratch) as url:
                found["drain"] = drain(url, sizes.runs, processes=sizes.processes,
                                       concurrency=sizes.concurrency)
            log(f"  {found['drain']['runs_per_s']:.0f} runs/s; recovery")
            with runner.fresh_database("postgres", scratch) as url:
                found["recovery"] = drain(
                    url, sizes.recovery_runs, processes=sizes.processes,
                    concurrency=sizes.concurrency, kill_at=1 / 3)["recovery"]
            log(f"  SIGKILL -> first live step {found['recovery']['first_s']:.2f} s")
            for workers in sizes.fleet:
                backlog = int(sizes.backlog_rate * (sizes.warmup + sizes.window))
                with runner.fresh_database("postgres", scratch) as url:
                    try:
                        cell = steady(url, workers, sizes, backlog)
                    except runner.BenchError as exc:
                        cell = {"failed": str(exc).splitlines()[0][:300]}
                found["sweep"][workers] = cell
                log(f"  {workers} workers: {cell.get('claims_per_s', 0):.0f} claims/s, "
                    f"{cell.get('runs_per_s', 0):.0f} runs/s {cell.get('failed', '')}")
            found["load_after"] = machine.load_now()
            reps.append(found)
    return {"reps": reps, "sizes": dataclasses.asdict(sizes)}


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _cells(reps: list[dict[str, Any]], workers: int) -> list[dict[str, Any]]:
    return [r["sweep"][workers] for r in reps if "failed" not in r["sweep"][workers]]


PEERS = (
    ("DBOS", "43,000 workflows/s", 43_000, 96,
     "one PostgreSQL of 96 vCPU; the workers' machines not counted"),
    ("Hatchet", "2,000 runs/s", 2_000, 8,
     "a database of 8 CPU; the engine's and workers' machines not counted"),
)


def markdown(found: dict[str, Any], info: dict[str, Any], argv: str) -> str:
    reps, sizes = found["reps"], found["sizes"]
    drains = [r["drain"] for r in reps]
    rec = [r["recovery"] for r in reps]
    steps = [ms for d in drains for ms in d["step_ms"]]
    runs_s = _median([d["runs_per_s"] for d in drains])
    # CPU of the database's backends and the workers per run: what a core
    # gives stead when it has the core to itself, however loaded the box.
    cpu_ms = _median([d["cpu_ms_per_run"] for d in drains])
    out = [BEGIN, "## Many workers on one PostgreSQL (`python -m bench --fleet`)", "",
           f"`{argv}`: {len(reps)} repetition(s), each load on a fresh database, the median "
           f"of them. Machine: {info['nproc']} cores ({info['cpu']}), PostgreSQL "
           f"{(info.get('postgres') or {}).get('server_version', '?')} on the same box, "
           f"stead {info['stead_commit']}. Load average (1/5/15 min) at each repetition's "
           "start and end: " + "; ".join(f"{r['load']} → {r['load_after']}" for r in reps)
           + ".", "",
           f"### {sizes['processes']} worker processes x concurrency {sizes['concurrency']}, "
           f"{sizes['runs']:,} runs of {STEPS} steps",
           "", "| rep | load | runs/s | steps/s | step p50 / p99 | claims per worker: "
           "min / max share, Jain | leases renewed/s | PG / workers / box cores | "
           "CPU per run | connections |", "|---|---|---|---|---|---|---|---|---|---|"]
    for i, d in enumerate(drains):
        out.append(
            f"| {i + 1} | {d['load']:.2f} | {d['runs_per_s']:.0f} | {d['steps_per_s']:.0f} | "
            f"{pct(d['step_ms'], 0.5):.1f} / {pct(d['step_ms'], 0.99):.1f} ms | "
            f"{d['min_share']:.1%} / {d['max_share']:.1%}, {d['jain']:.3f} | "
            f"{d['renewed_per_s']:.1f} | {d['pg_cores']:.2f} / {d['worker_cores']:.2f} / "
            f"{d['box_cores']:.2f} | {d['cpu_ms_per_run']:.1f} ms | {d['connections']} |")
    out += [f"| **median** | | **{runs_s:.0f}** | "
            f"**{_median([d['steps_per_s'] for d in drains]):.0f}** | "
            f"**{pct(steps, 0.5):.1f} / {pct(steps, 0.99):.1f} ms** (all reps' steps) | "
            f"Jain {_median([d['jain'] for d in drains]):.3f} | | | "
            f"**{cpu_ms:.1f} ms** | |", "",
            f"Recovery ({sizes['recovery_runs']:,} runs, one of the {sizes['processes']} workers "
            "SIGKILLed once a "
            "third were done): SIGKILL → another worker's first live step on one of its runs "
            + ", ".join(f"{r['first_s']:.2f} s" for r in rec)
            + f" (median **{_median([r['first_s'] for r in rec]):.2f} s**); → the last of "
            "its runs resumed " + ", ".join(f"{r['all_s']:.2f} s" for r in rec)
            + "; runs it held " + ", ".join(str(r["held"]) for r in rec) + ".", "",
            f"### A simulated fleet: Workers over {sizes['fleet_processes']} processes, "
            f"concurrency {sizes['fleet_concurrency']} each",
            "", f"Rates over a {sizes['window']:g} s window after {sizes['warmup']:g} s of "
            "warm-up, on a backlog that outlasts it; medians of the repetitions.", "",
            "| workers | claims/s (with runs) | runs claimed/s | claim p50 / p99 | runs/s | "
            "leases renewed/s | transactions/s | connections | PG / workers / box cores |",
            "|---|---|---|---|---|---|---|---|---|"]
    for workers in sizes["fleet"]:
        cells = _cells(reps, workers)
        if not cells:
            failed = reps[0]["sweep"][workers].get("failed", "?")
            out.append(f"| {workers} | failed: {failed} | | | | | | | |")
            continue

        def m(key: str, cells: list[dict[str, Any]] = cells) -> float:
            return _median([c[key] for c in cells])
        dry = " (backlog ran dry)" if any(c["dry"] for c in cells) else ""
        out.append(
            f"| {workers} | {m('claims_per_s'):.0f} ({m('fruitful_per_s'):.0f}) | "
            f"{m('claimed_per_s'):.0f} | {m('claim_p50'):.1f} / {m('claim_p99'):.1f} ms | "
            f"{m('runs_per_s'):.0f}{dry} | {m('renewed_per_s'):.1f} | {m('tx_per_s'):.0f} | "
            f"{m('connections'):.0f} | {m('pg_cores'):.2f} / {m('worker_cores'):.2f} / "
            f"{m('box_cores'):.2f} |")
    per_core = runs_s / info["nproc"]
    out += ["", "### Per core, beside the peers' published figures", "",
            "| system | published | setup | runs/s per core |", "|---|---|---|---|",
            f"| stead (this run) | {runs_s:.0f} runs/s ({STEPS} steps each) | "
            f"{sizes['processes']} x {sizes['concurrency']} workers "
            f"and PostgreSQL on one {info['nproc']}-core box, shared | **{per_core:.0f}** "
            "(of the whole box, database and workers) |",
            f"| stead, per CPU-second it used | {cpu_ms:.1f} ms of CPU per run (the "
            "database's backends and the workers) | the same run | "
            f"**{1000 / cpu_ms:.0f}** |"]
    for name, figure, rate, cores, setup in PEERS:
        out.append(f"| {name} | {figure} | {setup} | {rate / cores:.0f} (of the database "
                   "alone) |")
    out.append(END)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--write", action="store_true",
                        help="replace the fleet section of bench/RESULTS.md")
    args = parser.parse_args(argv)
    if why := runner.pg_available():
        print(f"the fleet mode needs PostgreSQL: {why}")
        return 1
    sizes = QUICK if args.quick else FULL
    if args.reps:
        sizes = dataclasses.replace(sizes, reps=args.reps)
    runner.warm_bytecode()
    info = machine.describe(peers=False)
    found = measure(sizes, lambda text: print(text, flush=True))
    text = markdown(found, info, "python -m bench.fleet " + " ".join(argv or []))
    print(text)
    if args.write:
        runner.write_section(text, runner.BENCH / "RESULTS.md", BEGIN, END)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
