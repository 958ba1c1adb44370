"""pyinstrument profiles of stead's side of a workload, taken when a target is
missed, to show where the time goes. pyinstrument is installed into the
project's venv if it is not there (it is a bench tool, not a dependency)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from bench import runner
from bench.runner import Child

OUT = runner.BENCH / "profiles"


def ensure_pyinstrument() -> None:
    python = runner.project_python()
    probe = subprocess.run([python, "-c", "import pyinstrument"], capture_output=True,
                           check=False)
    if probe.returncode != 0:
        subprocess.run([python, "-m", "pip", "install", "-q", "pyinstrument"], check=True)


def _profile_command(name: str, job: dict[str, Any]) -> tuple[list[str], Path]:
    OUT.mkdir(exist_ok=True)
    path = OUT / f"{name}.txt"
    cmd = [runner.project_python(), "-m", "pyinstrument", "-i", "0.0002", "-r", "text",
           "-o", str(path), "-m", "bench.w_stead", json.dumps(job)]
    return cmd, path


def profile(name: str, job: dict[str, Any], scratch: Path, db: str) -> Path:
    """Profile one stead workload run on a fresh database; return the text file."""
    ensure_pyinstrument()
    with runner.fresh_database(db, scratch) as url:
        cmd, path = _profile_command(name, {**job, "url": url})
        subprocess.run(cmd, cwd=runner.ROOT, env=runner._env(), check=True,
                       capture_output=True, text=True, timeout=1800)
    return path


def profile_recovery(name: str, n: int, scratch: Path, db: str, lease: float) -> Path:
    """Journal n steps, SIGKILL, then profile the fresh process that finishes."""
    ensure_pyinstrument()
    system = runner.systems()["stead"]
    with runner.fresh_database(db, scratch) as url:
        first = Child(system, system.job(workload="recover_prepare", url=url, n=n,
                                         lease_seconds=lease), env={"BENCH_HANG": "1"})
        try:
            run_id = first.wait_for("RUN", 120)[0]["run_id"]
            first.wait_for("READY", 300)
        finally:
            first.kill()
        time.sleep(lease + 0.2)
        cmd, path = _profile_command(
            name, {"workload": "recover", "url": url, "n": n, "run_id": run_id})
        subprocess.run(cmd, cwd=runner.ROOT, env=runner._env(), check=True,
                       capture_output=True, text=True, timeout=600)
    return path


def excerpt(path: Path, lines: int = 40) -> str:
    """The top of a profile: the frames that hold most of the time (the
    banner and the command line, which names a temporary database, dropped)."""
    body = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith(("Program:", "To view", "    pyinstrument")):
            continue
        if "Duration:" in line:
            line = "Duration:" + line.split("Duration:", 1)[1]
        elif line.lstrip().startswith(("_", "/_", "/   _/")):
            continue
        body.append(line)
    return "\n".join(body[:lines])
