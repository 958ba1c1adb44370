"""`python -m bench.days_kept [--days 0,90,365] [--before REF] [--write]`

What a PostgreSQL store's reads cost as the days of journal and events it
keeps grow (both are partitioned by day: one partition each per day kept).
For each number of days: a fresh database, its day partitions made for that
many days before today, `RUNS` runs waiting for an approval, and an idle
worker (default options) in another process. Measured there, by a process
running stead's code (this checkout's, or with `--before REF` also the code
at git ref REF, checked out in a scratch worktree, taking turns):

- delivery → next step: the approval delivered, until the run's next step
  has made its record (its `at`, against the time the delivery began), p50
  and p99 of `DELIVERIES` deliveries `GAP` apart;
- a rejected delivery to a run that does not exist (anyone can send one),
  p50 of `UNKNOWN` of them;
- a prune's check of a batch of 100 finished runs (`Store.prunable` of their
  ids), the median of 30.

A read that names one run opens that run's day alone and stays flat; one
that cannot (a join on a value read from another table, a statement planned
again at each run) grows with the days. Not part of CI nor of `python -m
bench`; with `--write` the section between the markers of bench/RESULTS.md
is replaced.
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

import stead
from bench import machine, runner
from stead.records import RunStatus

BEGIN, END = "<!-- days kept: begin -->", "<!-- days kept: end -->"
RUNS = 260  # waiting runs: the deliveries', then 100 finished for the prune's check
DELIVERIES = 150
GAP = 0.03  # seconds between two deliveries
UNKNOWN = 60
WARM = 5  # first samples of each series left out (a connection's first plans)

app = stead.App("days_bench")


def noted(run_id: str) -> str:
    return run_id


@app.workflow(version=1)
async def approval(run: stead.Run) -> str:
    event = await (await run.wait("approval", token=False))
    await run.step("after", noted, run.id)
    return str(event)


@dataclasses.dataclass(frozen=True)
class Row:
    days: int
    code: str
    deliver_p50: float
    deliver_p99: float
    unknown_p50: float
    prune_check: float
    load: str


async def _serve(url: str) -> None:
    store = await stead.open_store(url)
    worker = stead.Worker(app, store)
    task = asyncio.create_task(worker.run())
    print("IDLE", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    worker.stop()
    await task
    await store.close()


async def _measure(url: str, src: Path | None) -> dict[str, list[float]]:
    """Every series, in seconds, on the database at `url` (its day partitions
    made); the idle worker runs stead's code from `src` as this process does."""
    store = await stead.open_store(url)
    client = stead.Client(store, app)
    ids = [(await client.start(approval)).run_id for _ in range(RUNS)]
    await stead.Worker(app, store, stead.WorkerOptions(concurrency=32)).run_until_idle()
    worker = subprocess.Popen(
        [runner.project_python(), "-m", "bench.days_kept", "--worker", url], cwd=runner.ROOT,
        env=runner.code_env(src), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None and worker.stdin is not None
        if worker.stdout.readline().strip() != "IDLE":
            raise SystemExit("bench.days_kept: the idle worker did not start")
        await asyncio.sleep(1.0)  # settled into its idle loop
        sent: dict[str, float] = {}
        for run_id in ids[:DELIVERIES]:
            await asyncio.sleep(GAP)
            sent[run_id] = time.time()
            await client.deliver(run_id, event_id=f"e-{run_id}", kind="approval",
                                 payload={"ok": True})
        deadline = time.monotonic() + 120
        woke: dict[str, float] = {}
        while len(woke) < len(sent):
            if time.monotonic() > deadline:
                raise SystemExit("bench.days_kept: the delivered runs did not go on in 120 s")
            await asyncio.sleep(0.1)
            for run_id in sent.keys() - woke.keys():
                after = [r for r in await store.load_journal(run_id) if r.name == "after"]
                if after:
                    woke[run_id] = after[0].at
        unknown = []
        for i in range(UNKNOWN):
            t = time.perf_counter()
            await client.deliver(f"no-such-run-{i}-{time.time()}", event_id=f"x-{i}",
                                 kind="approval", payload={})
            unknown.append(time.perf_counter() - t)
        # The delivered runs finish: a batch of them, checked as a prune checks it.
        while (await store.count_runs()).get(RunStatus.COMPLETED, 0) < 100:
            await asyncio.sleep(0.1)
        done = [r.run_id for r in await store.list_runs(status="completed", limit=100)]
        cutoff = time.time() + 86400
        checks = []
        for _ in range(30 + WARM):
            t = time.perf_counter()
            await store.prunable(cutoff, len(done), done)
            checks.append(time.perf_counter() - t)
        return {"deliver": [woke[r] - sent[r] for r in sent][WARM:],
                "unknown": unknown[WARM:], "prune_check": checks[WARM:]}
    finally:
        if worker.stdin is not None:
            worker.stdin.write("\n")
            worker.stdin.flush()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
        await store.close()


def _add_days(url: str, days: int) -> None:
    import psycopg

    today = dt.datetime.now(dt.UTC).date()
    with psycopg.connect(url, autocommit=True) as conn:
        for back in range(1, days + 1):
            conn.execute("SELECT stead_add_day(%s)", (today - dt.timedelta(days=back),))


def measure(days: list[int], codes: list[tuple[str, Path | None]]) -> list[Row]:
    rows = []
    for n in days:
        for code, src in codes:
            before = machine.load_now()
            with runner.scratch_dir() as scratch, \
                    runner.fresh_database("postgres", scratch) as url:
                # The schema, migrated by the code measured; then the days.
                subprocess.run([runner.project_python(), "-c", _MIGRATE.format(url=url)],
                               cwd=runner.ROOT, env=runner.code_env(src), check=True)
                _add_days(url, n)
                done = subprocess.run(
                    [runner.project_python(), "-m", "bench.days_kept", "--measure", url,
                     *(["--src", str(src)] if src is not None else [])],
                    cwd=runner.ROOT, env=runner.code_env(src), check=True, capture_output=True,
                    text=True)
            series = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(Row(n, code, statistics.median(series["deliver"]),
                            runner.quantile(series["deliver"], 0.99),
                            statistics.median(series["unknown"]),
                            statistics.median(series["prune_check"]),
                            f"{before.split(' / ')[0]} → "
                            f"{machine.load_now().split(' / ')[0]}"))
            print(rows[-1], flush=True)
    return rows


_MIGRATE = ("import asyncio, stead\n"
            "async def main():\n"
            "    await (await stead.open_store({url!r})).close()\n"
            "asyncio.run(main())\n")


def render(rows: list[Row], days: list[int], before: str | None) -> str:
    flag = f" --before {before}" if before else ""
    lines = [
        BEGIN,
        "## Days kept: reads as the journal's and the events' day partitions grow "
        "(PostgreSQL)",
        "",
        f"`python -m bench.days_kept --days {','.join(map(str, days))}{flag}`, "
        f"{dt.date.today()}, {machine.describe(False).get('cpu', '')}, {os.cpu_count()} "
        f"CPUs. Each row a fresh database with that many days of partitions before today, "
        f"{RUNS} runs waiting, an idle worker in another process; delivery → next step over "
        f"{DELIVERIES - WARM} deliveries {GAP * 1000:.0f} ms apart, a rejected delivery to a "
        f"run that does not exist over {UNKNOWN - WARM}, a prune's check of 100 finished "
        "runs the median of 30. Load average (one minute) before → after each row.",
        "",
        "| days kept | " + ("code | " if before else "") +
        "delivery → next step p50 | p99 | rejected, unknown run p50 | prune's check of 100 "
        "| load |",
        "|---|---|---|---|---|---|" + ("---|" if before else ""),
    ]
    for r in rows:
        lines.append(f"| {r.days} | " + (f"{r.code} | " if before else "") +
                     f"{r.deliver_p50 * 1000:.1f} ms | {r.deliver_p99 * 1000:.1f} ms | "
                     f"{r.unknown_p50 * 1000:.1f} ms | {r.prune_check * 1000:.1f} ms | "
                     f"{r.load} |")
    lines.append(END)
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.days_kept")
    p.add_argument("--days", default="0,90,365")
    p.add_argument("--before", metavar="REF",
                   help="also measure each row with stead's code at this git ref, in turn")
    p.add_argument("--write", action="store_true")
    p.add_argument("--worker", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument("--measure", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument("--src", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        asyncio.run(_serve(args.worker))
        return 0
    if args.measure:
        src = None if args.src is None else Path(args.src)
        print(json.dumps(asyncio.run(_measure(args.measure, src))))
        return 0
    if runner.pg_available() is not None:
        raise SystemExit(f"bench.days_kept needs PostgreSQL: {runner.pg_available()}")
    days = [int(d) for d in args.days.split(",")]
    with runner.codes(args.before) as codes:
        rows = measure(days, codes)
    runner.publish(render(rows, days, args.before), BEGIN, END, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
