"""`python -m bench.takeover [--reps 5] [--write]`

How fast a run moves off a dead worker, and that it does not move off a live
one, on PostgreSQL with the default settings (30 s lease, 1.25 s presence
grace), with real worker processes (bench/w_takeover.py):

- SIGKILL → the other worker's first step on the run, with both workers on
  one machine (the holder judged by its process) and on two "hosts" (a UTS
  namespace each, `unshare --uts`, so only the presence lock and the lease
  can speak);
- a live worker whose presence connection is terminated again and again for
  five seconds, on two hosts: how many times its run moved (it must not).

Each figure is the median and the worst of `reps` repetitions, the load
average beside them. Not part of CI nor of `python -m bench`; with `--write`
the section between the markers of bench/RESULTS.md is replaced.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

from bench import machine, runner

BEGIN, END = "<!-- takeover: begin -->", "<!-- takeover: end -->"
ROOT = Path(__file__).resolve().parents[1]


class Pair:
    """Two worker processes on one database, each maybe on a host of its own."""

    def __init__(self, url: str, scratch: Path, hosts: tuple[str | None, str | None]) -> None:
        self.url, self.log = url, scratch / "steps.log"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        for worker_id, host in zip(("a", "b"), hosts, strict=True):
            self._start(worker_id, host, scratch)

    def _start(self, worker_id: str, host: str | None, scratch: Path) -> None:
        url = f"{self.url}?{urlencode({'application_name': f'bench-takeover-{worker_id}'})}"
        argv = [runner.project_python(), "-m", "bench.w_takeover", "--db", url,
                "--worker-id", worker_id, "--log", str(self.log)]
        if host is not None:
            argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, *argv]
        with open(scratch / f"{worker_id}.out", "wb") as out:
            self.procs[worker_id] = subprocess.Popen(argv, cwd=ROOT, stdout=out,
                                                     stderr=subprocess.STDOUT)

    def steps(self) -> list[tuple[str, int, float]]:
        if not self.log.exists():
            return []
        found = []
        for line in self.log.read_text().splitlines():
            worker, step, at = line.split()
            found.append((worker, int(step), float(at)))
        return found

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _admin(url: str, sql: str, *params: object) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql.encode(), params or None)
        return cur.fetchall() if cur.description else []


def _presence(url: str, worker_id: str) -> list[int]:
    rows = _admin(url, "SELECT DISTINCT a.pid FROM pg_stat_activity AS a JOIN pg_locks AS l "
                       "ON l.pid = a.pid WHERE a.application_name = %s AND l.locktype = "
                       "'advisory' AND l.granted AND l.classid = 1937007980",
                  f"bench-takeover-{worker_id}")
    return [int(str(r[0])) for r in rows]


def _wait(what: str, probe: object, timeout: float = 60.0) -> None:
    assert callable(probe)
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench.takeover: timed out waiting for {what}")
        time.sleep(0.01)


def _start_run(url: str, n: int) -> str:
    code = ("import asyncio, sys, stead\n"
            "async def main():\n"
            "    s = await stead.open_store(sys.argv[1])\n"
            "    print((await stead.Client(s).start('steps', int(sys.argv[2]), version=1)).run_id)\n"
            "    await s.close()\n"
            "asyncio.run(main())\n")
    done = subprocess.run([runner.project_python(), "-c", code, url, str(n)], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


@contextlib.contextmanager
def _pair(hosts: tuple[str | None, str | None]) -> Iterator[tuple[str, Pair]]:
    with tempfile.TemporaryDirectory() as scratch, \
            runner.fresh_database("postgres", Path(scratch)) as url:
        pair = Pair(url, Path(scratch), hosts)
        try:
            _wait("both workers' presence", lambda: all(_presence(url, w) for w in "ab"))
            yield url, pair
        finally:
            pair.stop()


def killed(hosts: tuple[str | None, str | None]) -> float:
    """SIGKILL of the holder → the other worker's first step on its run (s)."""
    with _pair(hosts) as (url, pair):
        _start_run(url, 100_000)
        _wait("a first step", lambda: len(pair.steps()) >= 3)
        holder = pair.steps()[-1][0]
        heir = "b" if holder == "a" else "a"
        pair.procs[holder].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        _wait("the heir's first step", lambda: any(w == heir for w, _s, _t in pair.steps()))
        return min(t for w, _s, t in pair.steps() if w == heir) - killed_at


def blipped(hosts: tuple[str | None, str | None], seconds: float = 5.0) -> tuple[int, int]:
    """Terminate the holder's presence connection whenever it holds one, for
    `seconds`: (times cut, steps the other worker ran: 0 if nothing moved)."""
    with _pair(hosts) as (url, pair):
        _start_run(url, 100_000)
        _wait("a first step", lambda: len(pair.steps()) >= 3)
        holder = pair.steps()[-1][0]
        cut, until = 0, time.monotonic() + seconds
        while time.monotonic() < until:
            for pid in _presence(url, holder):
                _admin(url, "SELECT pg_terminate_backend(%s)", pid)
                cut += 1
            time.sleep(0.05)
        time.sleep(2.0)  # past the grace: a wrong judgement would show by now
        return cut, sum(1 for w, _s, _t in pair.steps() if w != holder)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--write", action="store_true")
    args = p.parse_args()
    why = runner.pg_available()
    if why is not None:
        raise SystemExit(f"bench.takeover needs PostgreSQL: {why}")
    if shutil.which("unshare") is None or os.geteuid() != 0:
        raise SystemExit("bench.takeover needs root and unshare (two hosts: a UTS namespace each)")
    rows = []
    for label, hosts in (("one machine", (None, None)), ("two hosts", ("alpha", "beta"))):
        times, loads = [], []
        for _ in range(args.reps):
            loads.append(os.getloadavg()[0])
            times.append(killed(hosts))
        rows.append(f"| SIGKILL → the other worker's first step, {label} | "
                    f"{statistics.median(times):.2f} s | {max(times):.2f} s | "
                    f"{min(loads):.1f}–{max(loads):.1f} |")
    cuts, moved = [], []
    for _ in range(args.reps):
        c, m = blipped(("alpha", "beta"))
        cuts.append(c)
        moved.append(m)
    rows.append(f"| presence connection of a live worker cut {min(cuts)}–{max(cuts)} times in "
                f"5 s, two hosts: steps the other worker ran | {statistics.median(moved):.0f} | "
                f"{max(moved)} | |")
    text = "\n".join([
        BEGIN,
        "## Takeover on PostgreSQL: after a SIGKILL, and not after a dropped connection "
        "(issue 41)",
        "",
        f"`python -m bench.takeover --reps {args.reps}`, {dt.date.today()}, default settings "
        f"(30 s lease, 1.25 s presence grace), {machine.describe(False).get('cpu', '')}.",
        "",
        "| what | median | worst | load |",
        "|---|---|---|---|",
        *rows,
        END,
    ])
    print(text)
    if args.write:
        runner.write_section(text, runner.BENCH / "RESULTS.md", BEGIN, END)


if __name__ == "__main__":
    sys.exit(main())
