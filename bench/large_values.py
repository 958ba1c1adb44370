"""`python -m bench.large_values [--sizes 5,50,200] [--db sqlite|postgres|both] [--write]`

Peak RSS of a worker process that produces, and of one that replays, a
large step result (5 / 50 / 200 MB of JSON), on both stores: inline in the
journal (the behaviour before issue 35, with `max_result_bytes` raised) and
by reference (the value in a blob store directory, a reference journaled).
Each figure is one fresh process on a fresh database (bench/w_large.py); the
peak is the child's `ru_maxrss` as `wait4` reports it. The load average is
recorded beside each row: the machine is shared. Not part of CI nor of
`python -m bench`; with `--write` the section between the markers of
bench/RESULTS.md is replaced.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import machine, runner

BEGIN, END = "<!-- large values: begin -->", "<!-- large values: end -->"
MB = 1024 * 1024


def _measured(phase: str, url: str, n: int, blobs: str) -> tuple[float, str]:
    """Peak RSS (MiB) of one `bench.w_large` process, and what it printed."""
    argv = [runner.project_python(), "-m", "bench.w_large", phase, url, str(n), blobs]
    with open(os.devnull, "wb") as null:
        read, write = os.pipe()
        proc = subprocess.Popen(argv, cwd=runner.ROOT, env=runner._env(), stdout=write,
                                stderr=null)
        os.close(write)
        with os.fdopen(read) as pipe:
            out = pipe.read()
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise runner.BenchError(f"w_large {phase} {n} MB failed (exit {proc.returncode})")
    return usage.ru_maxrss / 1024, out


def measure(db: str, mode: str, size_mb: int, scratch: Path) -> dict[str, Any]:
    n = size_mb * MB
    blobs = str(scratch / f"blobs-{db}-{mode}-{size_mb}") if mode == "reference" else ""
    load = os.getloadavg()[0]
    with runner.fresh_database(db, scratch) as url:
        produced, _ = _measured("produce", url, n, blobs)
        replayed, out = _measured("replay", url, n, blobs)
    seconds = json.loads(out.strip().splitlines()[-1].partition(" ")[2])["seconds"]
    return {"db": db, "mode": mode, "mb": size_mb, "produce_mib": round(produced),
            "replay_mib": round(replayed), "replay_s": round(seconds, 2),
            "load": round(load, 2)}


def render(rows: list[dict[str, Any]], sizes: list[int], dbs: list[str], how: str) -> str:
    table = ["| store | result | inline: produce | inline: replay | by reference: produce | "
             "by reference: replay | replay time, inline / by reference | load (1 min) |",
             "|---|---|---|---|---|---|---|---|"]
    for db in dbs:
        for size in sizes:
            got = {r["mode"]: r for r in rows if r["db"] == db and r["mb"] == size}
            inline, ref = got["inline"], got["reference"]
            table.append(
                f"| {db} | {size} MB | {inline['produce_mib']} MiB | {inline['replay_mib']} MiB "
                f"| {ref['produce_mib']} MiB | {ref['replay_mib']} MiB | "
                f"{inline['replay_s']} s / {ref['replay_s']} s | "
                f"{inline['load']} / {ref['load']} |")
    return "\n".join([
        BEGIN,
        "## Large values: peak RSS of a worker that produces or replays one (issue 35)",
        "",
        f"`{how}`, {dt.date.today()}, {machine.describe(False).get('cpu', '')}. One step "
        "returns a string of that many bytes; its worker process exits once the step is "
        "journaled (produce), then a fresh worker process takes the run over, replays the "
        "step and completes the run (replay). Peak RSS is the process's `ru_maxrss`. "
        "Inline: the value in the journal row, `max_result_bytes` raised to 512 MB (before "
        "issue 35). By reference: the value in a blob-store directory, a reference "
        "journaled (default inline limit, 256 KB). Load: the 1-minute load average before "
        "the inline and the by-reference measurement (a shared 2-core machine).",
        "",
        *table,
        END,
    ])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="5,50,200")
    p.add_argument("--db", default="both", choices=("sqlite", "postgres", "both"))
    p.add_argument("--rows", type=Path, default=None,
                   help="Render the rows a run printed (JSON lines) instead of measuring.")
    p.add_argument("--write", action="store_true")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    dbs = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    how = f"python -m bench.large_values --sizes {args.sizes} --db {args.db}"
    rows: list[dict[str, Any]] = []
    if args.rows is not None:
        rows = [json.loads(line) for line in args.rows.read_text().splitlines()
                if line.startswith("{")]
    else:
        if "postgres" in dbs and runner.pg_available() is not None:
            raise SystemExit(f"bench.large_values: {runner.pg_available()}")
        with runner.scratch_dir() as scratch:
            for db in dbs:
                for size in sizes:
                    for mode in ("inline", "reference"):
                        row = measure(db, mode, size, scratch)
                        print(json.dumps(row), flush=True)
                        rows.append(row)
    text = render(rows, sizes, dbs, how)
    print(text)
    if args.write:
        runner.write_section(text, runner.BENCH / "RESULTS.md", BEGIN, END)


if __name__ == "__main__":
    sys.exit(main())
