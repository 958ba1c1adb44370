"""`python -m bench.failover [--reps 3] [--write]`

How fast a fleet makes progress again after a failover, with real worker
processes (bench/w_takeover.py: one long run of short steps each) on a
multi-host URL (`target_session_attrs=read-write`): a primary and a
synchronous standby are built on this machine (tests/replicas.py: initdb,
`pg_basebackup -R`), the primary is stopped `-m immediate` and the standby
promoted at once. Two figures: the primary's stop → the first step after it,
and the promotion → that step. Default settings (30 s lease, 1.25 s presence
grace, 30 s retries).

Each figure is the median and the worst of `reps` repetitions, the load
average beside them. Not part of CI nor of `python -m bench`; with `--write`
the section between the markers of bench/RESULTS.md is replaced.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from bench import machine, runner

BEGIN, END = "<!-- failover: begin -->", "<!-- failover: end -->"
ROOT = Path(__file__).resolve().parents[1]
RUNS = 4  # claimed by whichever worker is free


def _steps(log: Path) -> list[tuple[str, int, float]]:
    if not log.exists():
        return []
    return [(w, int(s), float(at)) for w, s, at in
            (line.split() for line in log.read_text().splitlines())]


def _wait(what: str, probe: object, timeout: float = 120.0) -> None:
    assert callable(probe)
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench.failover: timed out waiting for {what}")
        time.sleep(0.01)


def once() -> tuple[float, float]:
    """(primary stopped → first step after, promotion → that step), in seconds."""
    from tests.replicas import replicated

    with replicated() as servers, tempfile.TemporaryDirectory() as scratch:
        url = servers.url(schema="bench")
        log = Path(scratch) / "steps.log"
        code = ("import asyncio, sys, stead\n"
                "async def main():\n"
                "    s = await stead.open_store(sys.argv[1])\n"
                "    for _ in range(int(sys.argv[2])):\n"
                "        await stead.Client(s).start('steps', 100000, version=1)\n"
                "    await s.close()\n"
                "asyncio.run(main())\n")
        subprocess.run([runner.project_python(), "-c", code, url, str(RUNS)], cwd=ROOT,
                       check=True, capture_output=True)
        procs = []
        for worker_id in ("a", "b"):
            argv = [runner.project_python(), "-m", "bench.w_takeover", "--db",
                    f"{url}&{urlencode({'application_name': f'bench-failover-{worker_id}'})}",
                    "--worker-id", worker_id, "--log", str(log)]
            with open(Path(scratch) / f"{worker_id}.out", "wb") as out:
                procs.append(subprocess.Popen(argv, cwd=ROOT, stdout=out,
                                              stderr=subprocess.STDOUT))
        try:
            _wait("the runs under way", lambda: len(_steps(log)) >= 20)
            stopped = time.monotonic()
            promoted = servers.fail_over()
            seen = len(_steps(log))
            # Steps already under way when the primary stopped may log once more.
            _wait("a step after the promotion",
                  lambda: any(at > promoted for _w, _s, at in _steps(log)[seen:]))
            first = min(at for _w, _s, at in _steps(log)[seen:] if at > promoted)
            return first - stopped, first - promoted
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--write", action="store_true")
    args = p.parse_args()
    why = runner.pg_available()
    if why is not None:
        raise SystemExit(f"bench.failover needs PostgreSQL's server binaries: {why}")
    stops, promotions, loads = [], [], []
    for _ in range(args.reps):
        loads.append(os.getloadavg()[0])
        stop, promotion = once()
        stops.append(stop)
        promotions.append(promotion)
    load = f"{min(loads):.1f} to {max(loads):.1f}"
    text = "\n".join([
        BEGIN,
        "## Progress after a failover to a synchronous standby (issue 41)",
        "",
        f"`python -m bench.failover --reps {args.reps}`, {dt.date.today()}, two workers, "
        "default settings, primary stopped `-m immediate` and the standby promoted at once, "
        f"{machine.describe(False).get('cpu', '')}.",
        "",
        "| what | median | worst | load |",
        "|---|---|---|---|",
        f"| primary stopped → first step | {statistics.median(stops):.2f} s | "
        f"{max(stops):.2f} s | {load} |",
        f"| standby promoted → first step | {statistics.median(promotions):.2f} s | "
        f"{max(promotions):.2f} s | {load} |",
        END,
    ])
    print(text)
    if args.write:
        runner.write_section(text, runner.BENCH / "RESULTS.md", BEGIN, END)


if __name__ == "__main__":
    sys.exit(main())
