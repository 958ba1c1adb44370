"""`python -m bench.tenants [--burst 10000] [--hold SECONDS] [--reps N] [--before REF] [--write]`

Fair claims across tenants (issue 36), on SQLite and PostgreSQL in one run:
one worker process (`stead.Worker`, 16 slots) runs one-step runs while this
process starts them; with `--hold`, each run's step also waits that long
(as an agent's run waits on a model), so that the slots, not the CPU, are
what runs queue for. Tenant B starts a run every 20 ms throughout; its claim
latency (a run's first claim less its creation, both read from the store) is
measured alone (no burst), then beside a burst of `--burst` runs tenant A
starts at once, and again with the same runs started without tenants, which
the worker claims with the plain claim, oldest first (the unfair claim).
Throughput is the runs completed per second from the burst's start to its
last run's end. With `--before REF`, each row is measured twice in turn: by
a worker running stead's code at the git ref REF (checked out in a scratch
worktree) and by one running this checkout's, so a change is judged before
and after in one run, under the same load. With `--reps N`, every row is
measured N times (a store's cases each in turn, then again), and each
target is judged in every repetition.

Targets: B's p99 beside the burst within 2x of its figure alone, and the
fair claim's throughput within 10 % of the unfair claim's. The machine is
shared: the load average is read before and after each row. Not part of CI
nor of `python -m bench`; with `--write` the section between the markers of
bench/RESULTS.md is replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import stead
from bench import machine, runner
from stead.records import RunStatus

BEGIN, END = "<!-- tenants: begin -->", "<!-- tenants: end -->"
SLOTS = 16
TRICKLE = 0.02  # seconds between two of tenant B's starts
ALONE = 150  # B's runs measured with no burst

app = stead.App("tenants_bench")


@app.workflow()
async def work(run: stead.Run, n: int, hold: float = 0.0) -> int:
    async def step() -> int:
        if hold:
            await asyncio.sleep(hold)
        return n + 1

    return await run.step("work", step)


@dataclasses.dataclass(frozen=True)
class Row:
    store: str
    case: str
    p50: float
    p99: float
    samples: int
    throughput: float | None
    load: str
    code: str = ""  # with --before: "before (REF)" or "after"
    rep: int = 1


def _worker(url: str, src: Path | None) -> subprocess.Popen[bytes]:
    """The worker process; with `src`, importing stead from there."""
    return subprocess.Popen([runner.project_python(), "-m", "bench.tenants", "--worker", url],
                            cwd=runner.ROOT, env=runner.code_env(src))


async def _serve(url: str) -> None:
    store = await stead.open_store(url)
    try:
        await stead.Worker(app, store, stead.WorkerOptions(concurrency=SLOTS)).run()
    finally:
        await store.close()


async def _case(url: str, burst: int, tenants: bool, hold: float,
                src: Path | None = None) -> tuple[list[float], float | None]:
    """B's claim latencies (seconds) and, with a burst, the throughput (runs/s),
    of a worker running stead from `src` (None: this checkout)."""
    store = await stead.open_store(url)
    proc = _worker(url, src)
    try:
        client = stead.Client(store, app)
        warm = await client.start(work, 0)
        await client.result(warm.run_id, timeout=60)
        a, b = ("a", "b") if tenants else (None, None)
        began = store.clock.now()
        burst_ids: list[str] = []
        if burst:
            for at in range(0, burst, 1000):
                made = await client.start_many(
                    [stead.Start(work, (i, hold), tenant=a)
                     for i in range(at, min(burst, at + 1000))])
                burst_ids += [m.run_id for m in made]
        trickled: list[str] = []

        async def finished() -> bool:
            counts = await store.count_runs()
            return counts.get(RunStatus.COMPLETED, 0) >= 1 + len(burst_ids) + len(trickled)

        started: list[float] = []

        async def burst_done() -> bool:
            # Every run still live could be one of B's last (those started
            # within the hold and a second): the burst has ended.
            counts = await store.count_runs()
            live = counts.get(RunStatus.PENDING, 0) + counts.get(RunStatus.RUNNING, 0)
            now = time.monotonic()
            return live <= sum(1 for t in started if now - t < hold + 1.0)

        while True:
            trickled.append((await client.start(work, len(trickled), hold, tenant=b)).run_id)
            started.append(time.monotonic())
            await asyncio.sleep(TRICKLE)
            if len(trickled) >= ALONE and (not burst or await burst_done()):
                break
        deadline = time.monotonic() + 600
        while not await finished():
            if time.monotonic() > deadline:
                raise SystemExit("bench.tenants: the runs did not complete in 600 s")
            await asyncio.sleep(0.05)
        latencies = []
        for run_id in trickled:
            row = await store.get_run(run_id)
            assert row.started_at is not None
            latencies.append(row.started_at - row.created_at)
        throughput = None
        if burst:
            ends = [(await store.get_run(r)).updated_at for r in burst_ids + trickled]
            throughput = (len(burst_ids) + len(trickled)) / (max(ends) - began)
        return latencies, throughput
    finally:
        proc.terminate()
        proc.wait()
        await store.close()


async def measure(burst: int, hold: float,
                  codes: list[tuple[str, Path | None]] | None = None, reps: int = 1) -> list[Row]:
    """Every row, on each store, `reps` times; `codes`: the code each row is
    measured with, in turn (label, stead's source; None: this checkout)."""
    rows = []
    stores = ["sqlite"] + (["postgres"] if runner.pg_available() is None else [])
    cases = (("B alone", 0, True), (f"B beside A's {burst:,}, fair", burst, True),
             (f"B beside {burst:,}, unfair (no tenants)", burst, False))
    for db, rep in ((db, rep) for db in stores for rep in range(1, reps + 1)):
        for case, n, tenants in cases:
            for code, src in codes or [("", None)]:
                before = machine.load_now()
                with runner.scratch_dir() as scratch, runner.fresh_database(db, scratch) as url:
                    latencies, throughput = await _case(url, n, tenants, hold, src)
                rows.append(Row(db, case, statistics.median(latencies),
                                runner.quantile(latencies, 0.99), len(latencies), throughput,
                                f"{before.split(' / ')[0]} → "
                                f"{machine.load_now().split(' / ')[0]}", code, rep))
                print(rows[-1], flush=True)
    return rows


def markers(hold: float) -> tuple[str, str]:
    """The section's markers: one section per workload."""
    return (BEGIN, END) if not hold else (BEGIN.replace("tenants", "tenants-hold"),
                                          END.replace("tenants", "tenants-hold"))


def render(rows: list[Row], burst: int, hold: float, before: str | None = None) -> str:
    begin, end = markers(hold)
    flag = (f" --hold {hold:g}" if hold else "") + (f" --before {before}" if before else "")
    codes = list(dict.fromkeys(r.code for r in rows))
    reps = max(r.rep for r in rows)
    flag += f" --reps {reps}" if reps > 1 else ""
    work_is = (f"each run one step that waits {hold * 1000:.0f} ms (an agent's model call)"
               if hold else "each run one step that returns at once (CPU-bound)")
    lines = [
        begin,
        "## Fair claims across tenants (issue 36)" + (f", runs holding {hold:g} s" if hold
                                                      else ""),
        "",
        f"`python -m bench.tenants --burst {burst}{flag}`, {dt.date.today()}, one worker "
        f"process ({SLOTS} slots), {work_is}, tenant B starting a run every "
        f"{TRICKLE * 1000:.0f} ms; {machine.describe(False).get('cpu', '')}, "
        f"{os.cpu_count()} CPUs, shared with other work (load average, one minute, before → "
        "after each row).",
        "",
        "| store | " + ("rep | " if reps > 1 else "") + "case | " +
        ("code | " if before else "") +
        "B's claim latency p50 | p99 | B's runs | throughput | load |",
        "|---|---|---|---|---|---|---|" + ("---|" if before else "") + ("---|" if reps > 1
                                                                         else ""),
    ]
    for r in rows:
        tp = "" if r.throughput is None else f"{r.throughput:.0f} runs/s"
        lines.append(f"| {r.store} | " + (f"{r.rep} | " if reps > 1 else "") + f"{r.case} | " +
                     (f"{r.code} | " if before else "") +
                     f"{r.p50 * 1000:.1f} ms | {r.p99 * 1000:.1f} ms "
                     f"| {r.samples} | {tp} | {r.load} |")
    lines.append("")
    for db, code in ((db, code) for db in dict.fromkeys(r.store for r in rows) for code in codes):
        p99s, shares = [], []
        for rep in range(1, reps + 1):
            alone, fair, unfair = [r for r in rows
                                   if r.store == db and r.code == code and r.rep == rep]
            assert fair.throughput is not None and unfair.throughput is not None
            p99s.append(fair.p99 / alone.p99)
            shares.append(fair.throughput / unfair.throughput)
        lines.append(
            f"- {db}{f', {code}' if code else ''}: B's p99 beside the burst is "
            f"{', '.join(f'{x:.2f}x' for x in p99s)} its p99 alone "
            f"(target ≤ 2x: {_met(x <= 2 for x in p99s)}); the fair claim's throughput is "
            f"{', '.join(f'{x:.0%}' for x in shares)} of the unfair claim's "
            f"(target ≥ 90 %: {_met(x >= 0.9 for x in shares)}).")
    lines.append(end)
    return "\n".join(lines)


def _met(each: Iterable[bool]) -> str:
    """A target judged in every repetition: met, missed, or in how many."""
    judged = list(each)
    if all(judged):
        return "met"
    if len(judged) == 1 or not any(judged):
        return "missed"
    return f"met in {sum(judged)} of {len(judged)}"


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tenants")
    p.add_argument("--burst", type=int, default=10_000)
    p.add_argument("--hold", type=float, default=0.0)
    p.add_argument("--reps", type=int, default=1, help="repetitions of every row, interleaved")
    p.add_argument("--before", metavar="REF",
                   help="also measure each row with stead's code at this git ref, in turn")
    p.add_argument("--write", action="store_true")
    p.add_argument("--worker", metavar="URL", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        asyncio.run(_serve(args.worker))
        return 0
    with runner.codes(args.before) as codes:
        rows = asyncio.run(measure(args.burst, args.hold, codes, max(1, args.reps)))
    runner.publish(render(rows, args.burst, args.hold, args.before), *markers(args.hold),
                   args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
