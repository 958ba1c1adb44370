"""`python -m bench.metrics_cost [--db sqlite|postgres|both] [--reps N] [--n STEPS]`

What stead's metrics cost on the step path: the sequential workload (one run
of N trivial sync steps, as in workload 1) with the metrics off and on
(`stead.metrics.exposition.Exposition`, the OpenTelemetry SDK read by the
Prometheus exporter), alternated in one process on a fresh database each
time; the medians side by side and their ratio. The scrape is not on the
step path: one is made after each "on" run, untimed, to check it renders.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from bench import runner
from bench.w_stead import app, seq

MODES = ("off", "on", "on, the step's hook a no-op")


async def _once(url: str, n: int, mode: str) -> tuple[float, float]:
    import stead
    from stead.metrics import meters
    from stead.metrics.exposition import Exposition

    store = await stead.open_store(url)
    exposition = None if mode == "off" else Exposition()
    hook = meters.call_took
    if mode == MODES[2]:  # the SDK loaded and instrumented, the step's record skipped
        meters.call_took = lambda *_a, **_k: None
    try:
        await stead.Client(store, app).start(seq, n)
        worker = stead.Worker(app, store, stead.WorkerOptions(concurrency=1))
        began, cpu = time.perf_counter(), time.process_time()
        await worker.run_until_idle()
        elapsed, used = time.perf_counter() - began, time.process_time() - cpu
        if exposition is not None:
            await exposition.fleet.refresh(store, grace=60.0)
            exposition.render()
        return elapsed / n * 1e6, used / n * 1e6
    finally:
        meters.call_took = hook
        if exposition is not None:
            exposition.close()
        await store.close()


def hook_cpu_us(n: int = 20_000) -> float:
    """CPU µs of the one hook a live step adds (`meters.call_took`, a histogram
    record through the OpenTelemetry SDK), timed alone: what the load on a shared
    machine blurs in the whole run's numbers."""
    from stead.metrics import meters
    from stead.metrics.exposition import Exposition

    exposition = Exposition()
    try:
        began = time.process_time()
        for _ in range(n):
            meters.call_took("step", 0.001, ok=True)
        return (time.process_time() - began) / n * 1e6
    finally:
        exposition.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--n", type=int, default=1000)
    args = parser.parse_args()
    dbs = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    if "postgres" in dbs and (why := runner.pg_available()):
        print(f"skipping PostgreSQL: {why}")
        dbs.remove("postgres")
    print("| store | measure | metrics off: µs per step | metrics on: µs per step | on / off "
          "| target |\n|---|---|---|---|---|---|")
    with runner.scratch_dir() as scratch:
        for db in dbs:
            times: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
            for rep in range(args.reps):
                order = MODES if rep % 2 == 0 else MODES[::-1]  # alternate which goes first
                for mode in order:
                    with runner.fresh_database(db, scratch) as url:
                        times[mode].append(asyncio.run(_once(url, args.n, mode)))
            for i, measure in enumerate(("wall clock", "CPU, every thread")):
                off = statistics.median(t[i] for t in times["off"])
                for mode in MODES[1:]:
                    on = statistics.median(t[i] for t in times[mode])
                    ratio = on / off
                    print(f"| {db} | {measure}, metrics {mode} | {off:.0f} | {on:.0f} | "
                          f"{ratio:.3f} | <= 1.05: {'met' if ratio <= 1.05 else 'missed'} |",
                          flush=True)
            cpu_off = statistics.median(t[1] for t in times["off"])
            hook = hook_cpu_us()
            ratio = (cpu_off + hook) / cpu_off
            print(f"| {db} | CPU, off + the hook timed alone ({hook:.1f} µs) | {cpu_off:.0f} | "
                  f"{cpu_off + hook:.0f} | {ratio:.3f} | <= 1.05: "
                  f"{'met' if ratio <= 1.05 else 'missed'} |", flush=True)


if __name__ == "__main__":
    main()
