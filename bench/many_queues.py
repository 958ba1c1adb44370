"""`python -m bench.many_queues [--queues 0,50,500] [--before REF] [--write]`

What the queues an app declares cost a worker whose work is elsewhere: an
app declaring that many queues (a queue per customer, say) starts `RUNS`
one-step runs outside any queue, and one worker process (16 slots) runs
them until idle; runs completed per second, on SQLite and PostgreSQL. A
worker's claim asks which queues have work before it claims any, so a
queue with no run should cost it nothing. With `--before REF`, each row is
measured with stead's code at git ref REF too (a scratch worktree), in
turn with this checkout's. Not part of CI nor of `python -m bench`; with
`--write` the section between the markers of bench/RESULTS.md is replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench import machine, runner

BEGIN, END = "<!-- many queues: begin -->", "<!-- many queues: end -->"
RUNS = 1000
SLOTS = 16


@dataclasses.dataclass(frozen=True)
class Row:
    store: str
    queues: int
    code: str
    runs_per_second: float
    load: str


async def _measure(url: str, queues: int) -> float:
    import stead

    app = stead.App("many_queues")
    for i in range(queues):
        app.queue(f"customer-{i}")

    @app.workflow()
    async def work(run: stead.Run, n: int) -> int:
        return await run.step("s", lambda: n)

    store = await stead.open_store(url)
    try:
        await stead.Client(store, app).start_many([stead.Start(work, (i,)) for i in range(RUNS)])
        worker = stead.Worker(app, store, stead.WorkerOptions(concurrency=SLOTS))
        t0 = time.perf_counter()
        await worker.run_until_idle()
        return RUNS / (time.perf_counter() - t0)
    finally:
        await store.close()


def measure(counts: list[int], codes: list[tuple[str, Path | None]]) -> list[Row]:
    rows = []
    stores = ["sqlite"] + (["postgres"] if runner.pg_available() is None else [])
    for db in stores:
        for n in counts:
            for code, src in codes:
                before = machine.load_now()
                with runner.scratch_dir() as scratch, runner.fresh_database(db, scratch) as url:
                    done = subprocess.run(
                        [runner.project_python(), "-m", "bench.many_queues", "--measure", url,
                         "--queues", str(n)],
                        cwd=runner.ROOT, env=runner.code_env(src), check=True,
                        capture_output=True, text=True)
                rate = float(json.loads(done.stdout.strip().splitlines()[-1]))
                rows.append(Row(db, n, code, rate, f"{before.split(' / ')[0]} → "
                                                   f"{machine.load_now().split(' / ')[0]}"))
                print(rows[-1], flush=True)
    return rows


def render(rows: list[Row], counts: list[int], before: str | None) -> str:
    flag = f" --before {before}" if before else ""
    lines = [
        BEGIN,
        "## Many queues declared: a worker whose runs are in none of them",
        "",
        f"`python -m bench.many_queues --queues {','.join(map(str, counts))}{flag}`, "
        f"{dt.date.today()}, {machine.describe(False).get('cpu', '')}, {os.cpu_count()} CPUs. "
        f"{RUNS:,} one-step runs outside any queue, one worker ({SLOTS} slots) until idle, "
        "its app declaring that many queues (empty). Load average (one minute) before → "
        "after each row.",
        "",
        "| store | queues declared | " + ("code | " if before else "") +
        "runs/s | load |",
        "|---|---|---|---|" + ("---|" if before else ""),
    ]
    for r in rows:
        lines.append(f"| {r.store} | {r.queues} | " + (f"{r.code} | " if before else "") +
                     f"{r.runs_per_second:,.0f} | {r.load} |")
    lines.append(END)
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.many_queues")
    p.add_argument("--queues", default="0,50,500")
    p.add_argument("--before", metavar="REF",
                   help="also measure each row with stead's code at this git ref, in turn")
    p.add_argument("--write", action="store_true")
    p.add_argument("--measure", metavar="URL", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        print(json.dumps(asyncio.run(_measure(args.measure, int(args.queues)))))
        return 0
    counts = [int(n) for n in args.queues.split(",")]
    with runner.codes(args.before) as codes:
        rows = measure(counts, codes)
    runner.publish(render(rows, counts, args.before), BEGIN, END, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
