"""`python -m bench.many_customers [--queues 0,50,500] [--tenants 0,50,500]
[--busy 500,1000] [--before REF] [--write]`

What serving many customers costs one worker: `RUNS` one-step runs, run
until idle by one worker process (16 slots); runs completed per second, on
SQLite and PostgreSQL, with the customers as

- queues: the app declares that many queues (a queue per customer), all
  empty, and the runs are outside them. A claim asks which queues have work
  before it claims any, so a queue with no run should cost nothing;
- tenants: the runs are spread evenly over that many tenants (0: none), so
  each claim shares its slots among all of them (`stead.tenants.fair`);
- busy tenants: that many tenants each hold a run leased by another worker
  and have runs ready; the median time of a fair claim of 16 slots (a fleet
  serving them all: every tenant has a run in flight when a claim shares
  the slots).

With `--before REF`, each row is measured with stead's code at git ref REF
too (a scratch worktree), in turn with this checkout's. Not part of CI nor
of `python -m bench`; with `--write` the section between the markers of
bench/RESULTS.md is replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import machine, runner

BEGIN, END = "<!-- many customers: begin -->", "<!-- many customers: end -->"
RUNS = 1000
SLOTS = 16
# Fair claims timed per busy-tenants row (the median is reported), and the
# fewest runs each busy tenant has ready beside the one it holds (more when
# the tenants are too few to fill every claim timed).
CLAIMS = 20
READY = 3


@dataclasses.dataclass(frozen=True)
class Row:
    store: str
    kind: str  # "queues", "tenants" or "busy"
    customers: int
    code: str
    figure: float  # runs/s; for "busy", a claim's median ms
    load: str


async def _measure(url: str, kind: str, customers: int) -> float:
    import stead

    app = stead.App("many_customers")
    for i in range(customers if kind == "queues" else 0):
        app.queue(f"customer-{i}")
    tenants = customers if kind == "tenants" else 0

    @app.workflow()
    async def work(run: stead.Run, n: int) -> int:
        return await run.step("s", lambda: n)

    store = await stead.open_store(url)
    try:
        await stead.Client(store, app).start_many([
            stead.Start(work, (i,), tenant=f"customer-{i % tenants}" if tenants else None)
            for i in range(RUNS)])
        worker = stead.Worker(app, store, stead.WorkerOptions(concurrency=SLOTS))
        t0 = time.perf_counter()
        await worker.run_until_idle()
        return RUNS / (time.perf_counter() - t0)
    finally:
        await store.close()


async def _measure_busy(url: str, tenants: int) -> float:
    import stead
    from stead.tenants import fair

    app = stead.App("many_customers")

    @app.workflow()
    async def work(run: stead.Run, n: int) -> int:
        return n

    def one_each() -> list[stead.Start]:
        return [stead.Start(work, (i,), tenant=f"customer-{i}") for i in range(tenants)]

    store = await stead.open_store(url)
    try:
        client = stead.Client(store, app)
        await client.start_many(one_each())
        hosted = app.hosted()
        held = await store.claim("elsewhere", hosted, 3600.0, tenants)
        assert len(held) == tenants, f"leased {len(held)} of {tenants}"
        for _ in range(max(READY, -(-CLAIMS * SLOTS // tenants))):
            await client.start_many(one_each())
        took = []
        for turn in range(CLAIMS):
            t0 = time.perf_counter()
            got = await store.claim_fair(fair.Policy(), "measured", hosted, 3600.0, SLOTS,
                                         turn=turn, keep=1)
            took.append(time.perf_counter() - t0)
            assert got, "the claim took nothing"
        return statistics.median(took) * 1000
    finally:
        await store.close()


def measure(counts: dict[str, list[int]], codes: list[tuple[str, Path | None]]) -> list[Row]:
    rows = []
    stores = ["sqlite"] + (["postgres"] if runner.pg_available() is None else [])
    cells = [(kind, n) for kind, ns in counts.items() for n in ns]
    for db in stores:
        for kind, n in cells:
            for code, src in codes:
                before = machine.load_now()
                with runner.scratch_dir() as scratch, runner.fresh_database(db, scratch) as url:
                    done = subprocess.run(
                        [runner.project_python(), "-m", "bench.many_customers", "--measure",
                         url, "--kind", kind, "--count", str(n)],
                        cwd=runner.ROOT, env=runner.code_env(src), check=True,
                        capture_output=True, text=True)
                figure = float(json.loads(done.stdout.strip().splitlines()[-1]))
                rows.append(Row(db, kind, n, code, figure, f"{before.split(' / ')[0]} → "
                                                   f"{machine.load_now().split(' / ')[0]}"))
                print(rows[-1], flush=True)
    return rows


def _line(what: list[str], code: str, figures: list[str], before: str | None) -> str:
    """A table's line: the code's column between what a row is and its figures
    when the rows are measured before and after."""
    return "| " + " | ".join([*what, *([code] if before else []), *figures]) + " |"


def _header(what: list[str], figures: list[str], before: str | None) -> list[str]:
    head = _line(what, "code", figures, before)
    return [head, "|" + "---|" * head.count(" | ") + "---|"]


def render(rows: list[Row], counts: dict[str, list[int]], before: str | None) -> str:
    flags = "".join(f" --{kind} {','.join(map(str, ns))}" for kind, ns in counts.items())
    flags += f" --before {before}" if before else ""
    lines = [
        BEGIN,
        "## Many customers: queues declared, runs spread over tenants",
        "",
        f"`python -m bench.many_customers{flags}`, "
        f"{dt.date.today()}, {machine.describe(False).get('cpu', '')}, {os.cpu_count()} CPUs. "
        f"{RUNS:,} one-step runs, one worker ({SLOTS} slots) until idle. *queues*: its app "
        "declares that many queues, all empty, and the runs are in none of them; *tenants*: "
        "the runs are spread evenly over that many tenants (0: none), so every claim is "
        "shared among them. Load average (one minute) before → after each row.",
        "",
        *_header(["store", "customers as", "how many"], ["runs/s", "load"], before),
    ]
    for r in rows:
        if r.kind != "busy":
            lines.append(_line([r.store, r.kind, str(r.customers)], r.code,
                               [f"{r.figure:,.0f}", r.load], before))
    busy = [r for r in rows if r.kind == "busy"]
    if busy:
        lines += [
            "",
            f"*Busy tenants*: that many tenants each hold a run leased by another worker and "
            f"have {READY} runs ready (more if too few to fill every claim); the median of "
            f"{CLAIMS} fair claims of {SLOTS} slots (one slot kept, as a worker does), each "
            "row on a fresh database.",
            "",
            *_header(["store", "busy tenants"], ["a fair claim, median", "load"], before),
        ]
        lines += [_line([r.store, str(r.customers)], r.code, [f"{r.figure:,.1f} ms", r.load],
                        before) for r in busy]
    lines.append(END)
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.many_customers")
    p.add_argument("--queues", default="0,50,500", help="how many queues declared ('': none)")
    p.add_argument("--tenants", default="0,50,500", help="how many tenants ('': none)")
    p.add_argument("--busy", default="500,1000",
                   help="how many tenants with a run in flight each ('': none)")
    p.add_argument("--before", metavar="REF",
                   help="also measure each row with stead's code at this git ref, in turn")
    p.add_argument("--write", action="store_true")
    p.add_argument("--measure", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument("--kind", choices=("queues", "tenants", "busy"), help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        measured = (_measure_busy(args.measure, args.count) if args.kind == "busy"
                    else _measure(args.measure, args.kind, args.count))
        print(json.dumps(asyncio.run(measured)))
        return 0
    asked = {kind: [int(n) for n in text.split(",") if n.strip()]
             for kind, text in (("queues", args.queues), ("tenants", args.tenants),
                                ("busy", args.busy))}
    counts = {kind: ns for kind, ns in asked.items() if ns}
    with runner.codes(args.before) as codes:
        rows = measure(counts, codes)
    runner.publish(render(rows, counts, args.before), BEGIN, END, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
