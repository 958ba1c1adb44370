"""`python -m bench.encryption_cost [--db sqlite|postgres|both] [--reps N] [--n STEPS]`

What sealing payloads at rest costs on the step path (issue 35, target: under
10 % of the SQLite step): the sequential workload (one run of N trivial sync
steps, as in workload 1) with encryption off and on (`open_store(payloads=
True)`: AES-256-GCM under the run's data key, `stead.payloads`), alternated in
one process on a fresh database each time; the medians side by side, their
ratio, and the median of each off/on pair's ratio (a pair runs back to back,
so a load that drifts over minutes weighs on both alike), and the machine's
load average (a shared machine blurs the numbers).
The CPU of one seal and one open of a step's journal value, timed alone, is
printed too: what the load cannot blur.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from bench import runner
from bench.w_stead import app, seq

MODES = ("off", "on")


def _ring() -> object:
    from stead import keys

    return keys.Keyring((keys.new_key(),), data_keys=(keys.new_key(),))


async def _once(url: str, n: int, mode: str) -> tuple[float, float]:
    import stead

    store = await stead.open_store(url, keys=_ring(),  # type: ignore[arg-type]
                                   payloads=mode == "on")
    try:
        await stead.Client(store, app).start(seq, n)
        worker = stead.Worker(app, store, stead.WorkerOptions(concurrency=1))
        began, cpu = time.perf_counter(), time.process_time()
        await worker.run_until_idle()
        elapsed, used = time.perf_counter() - began, time.process_time() - cpu
        return elapsed / n * 1e6, used / n * 1e6
    finally:
        await store.close()


def seal_cpu_us(text: str, n: int = 20_000, *, opened: bool = True) -> float:
    """CPU µs of sealing (and, if `opened`, opening) `text` once, with the
    data key in hand."""
    from stead import keys
    from stead.payloads import KeyringCodec, Sealer, What, Where

    ring = keys.Keyring((keys.new_key(),), data_keys=(keys.new_key(),))
    sealer = Sealer(KeyringCodec(ring))
    key, _ = sealer.new_key("run")
    where = Where("run", What.JOURNAL)
    began = time.process_time()
    for _ in range(n):
        sealed = sealer.seal(text, where, key)
        if opened:
            sealer.unseal(sealed, where, key)
    return (time.process_time() - began) / n * 1e6


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
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"({os.cpu_count()} cores)")
    print("| store | measure | encryption off: µs per step | on: µs per step | on / off "
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
                on = statistics.median(t[i] for t in times["on"])
                ratio = on / off
                print(f"| {db} | {measure}, medians | {off:.0f} | {on:.0f} | {ratio:.3f} | "
                      f"< 1.10: {'met' if ratio < 1.10 else 'missed'} |", flush=True)
                pairs = statistics.median(b[i] / a[i] for a, b in zip(times["off"], times["on"],
                                                                      strict=True))
                print(f"| {db} | {measure}, median of the pairs' ratios | | | {pairs:.3f} | "
                      f"< 1.10: {'met' if pairs < 1.10 else 'missed'} |", flush=True)
            # A live step seals its one record (its value, as the journal keeps it).
            cpu_off = statistics.median(t[1] for t in times["off"])
            one = seal_cpu_us('{"v": 1, "ok": true}', opened=False)
            ratio = (cpu_off + one) / cpu_off
            print(f"| {db} | CPU, off + one seal timed alone ({one:.1f} µs) | {cpu_off:.0f} | "
                  f"{cpu_off + one:.0f} | {ratio:.3f} | < 1.10: "
                  f"{'met' if ratio < 1.10 else 'missed'} |", flush=True)
    for size in (16, 1024, 64 * 1024):
        value = '"' + "x" * size + '"'
        print(f"seal + open of a {size}-byte value, CPU alone: {seal_cpu_us(value):.1f} µs")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
