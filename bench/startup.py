"""`python -m bench.startup [--runs N] [--src DIR ...]`

The CPU time (user + system) a fresh process spends to start: `import stead`,
`stead --help`, `stead runs ls` on a small SQLite database, a few other
commands, and `stead worker` from exec to the first line of the first run it
claims, fresh or taken over from a worker that died holding it
(`bench/startup_app.py`, whose workflow notes its process's CPU time).
CPU time, not wall time, because this box is shared: other processes slow a
command's wall clock down, much less the CPU it uses itself. Each command runs
`--runs` times; the table shows the least and the median.

`--src DIR` measures the package in `DIR/src` instead (put first on
`PYTHONPATH`), so a checkout of another commit (`git archive REV | tar -x -C
DIR`) can be measured in the same run, with the same interpreter and
libraries, for a before and after: the trees take turns, each on a database
of its own. The targets: `stead runs ls` and `stead
--help` under 150 ms, `stead worker` to its first claimed run under 250 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET_MS = 150.0
WORKER_TARGET_MS = 250.0

COMMANDS: dict[str, list[str]] = {
    "python (nothing imported)": ["-c", "pass"],
    "import stead": ["-c", "import stead"],
    "stead --help": ["-m", "stead", "--help"],
    "stead runs ls": ["-m", "stead", "runs", "ls"],
    "stead runs ls --stranded": ["-m", "stead", "runs", "ls", "--stranded"],
    "stead db prune --help": ["-m", "stead", "db", "prune", "--help"],
    "stead worker --help": ["-m", "stead", "worker", "--help"],
}
# `stead worker` on a database holding one pending run of the app's workflow,
# until idle: measured by the workflow itself, as the worker enters it and as
# its first step runs.
WORKER = "stead worker: exec → first claimed run entered"
WORKER_STEP = "stead worker: exec → that run's first step running"
# The same after a worker died holding the run (1 s lease): the new worker
# waits the lease out, takes the run over and replays its first step.
TAKEOVER = "stead worker: exec → a dead worker's run entered"
WORKERS = (WORKER, WORKER_STEP, TAKEOVER)
APP = "bench.startup_app:app"
ROOT = Path(__file__).resolve().parent.parent


def cpu_ms(argv: list[str], env: dict[str, str], cwd: str) -> float:
    """The CPU time of one child process running `argv`, in milliseconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return 1000 * ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))


def worker_ms(env: dict[str, str], folder: str, *, takeover: bool = False
              ) -> tuple[float, float | None]:
    """Start one run, then a worker until idle (with `takeover`, first a
    worker that dies holding it): the CPU time the last worker's process had
    used when the run's workflow began, and when its first step ran (None
    for a takeover, which replays it), in milliseconds."""
    done = subprocess.run([sys.executable, "-m", "stead", "start", "-q", APP, "entered"],
                          env=env, cwd=folder, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"stead start failed ({done.returncode}): {done.stderr.strip()}")
    entered = Path(folder) / "entered.json"
    entered.unlink(missing_ok=True)
    worker = [sys.executable, "-m", "stead", "worker", APP, "--until-idle", "--lease", "1"]
    if takeover:
        died = subprocess.run(worker, env={**env, "BENCH_CRASH": "1"}, cwd=folder,
                              capture_output=True, text=True)
        if died.returncode != 3:
            raise SystemExit(f"the first worker did not die in the run: {died.stderr.strip()}")
    cpu_ms(worker, {**env, "BENCH_ENTERED": str(entered)}, folder)
    if not entered.exists():
        raise SystemExit("the worker exited without running the run it was given")
    at = json.loads(entered.read_text())
    return 1000 * at["entered"], 1000 * at["step"] if "step" in at else None


def prepare(src: Path | None, folder: str) -> dict[str, str]:
    """The environment that runs the stead of `src` (None: this checkout) on a
    database of its own in `folder`, migrated by that stead, with the bytecode
    of every command's modules cached."""
    env = {**os.environ, "STEAD_DATABASE_URL": f"sqlite:///{folder}/stead.db"}
    # As a user's install runs: with compiled bytecode cached (pip compiles it
    # at install), not compiling every module at every start.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # The app is `bench.startup_app`, from this checkout whichever stead is measured.
    paths = [str(ROOT), env.get("PYTHONPATH", "")]
    if src is not None:
        paths.insert(0, str(src / "src"))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    subprocess.run([sys.executable, "-m", "stead", "db", "migrate"], env=env, cwd=folder,
                   check=True, capture_output=True)
    for args in COMMANDS.values():  # writes the bytecode cache, not measured
        cpu_ms([sys.executable, *args], env, folder)
    worker_ms(env, folder)
    return env


def measure(env: dict[str, str], folder: str, times: dict[str, list[float]]) -> None:
    """One turn of every command, in order, into `times`."""
    for name, args in COMMANDS.items():
        times[name].append(cpu_ms([sys.executable, *args], env, folder))
    claimed, stepped = worker_ms(env, folder)
    assert stepped is not None
    times[WORKER].append(claimed)
    times[WORKER_STEP].append(stepped)
    times[TAKEOVER].append(worker_ms(env, folder, takeover=True)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--src", action="append", type=Path, default=[],
                        help="Also measure the checkout at DIR (repeatable).")
    options = parser.parse_args()
    load_before = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    trees: list[tuple[str, Path | None]] = [("this checkout", None)]
    trees += [(str(path), path) for path in options.src]
    results: dict[str, dict[str, list[float]]] = {
        label: {name: [] for name in [*COMMANDS, *WORKERS]} for label, _ in trees}
    with tempfile.TemporaryDirectory() as top:
        # A database per tree: each is at its own schema version.
        folders = {label: os.path.join(top, str(n)) for n, (label, _) in enumerate(trees)}
        envs = {}
        for label, src in trees:
            os.mkdir(folders[label])
            envs[label] = prepare(src, folders[label])
        for _ in range(options.runs):
            # The trees take turns, and so do the commands: drift in the box's
            # load is spread over every cell.
            for label, _src in trees:
                measure(envs[label], folders[label], results[label])
    load_after = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    labels = list(results)
    head = "| command | " + " | ".join(f"{label}: least / median ms" for label in labels) + " |"
    print(f"CPU ms (user+sys) of a fresh process, {options.runs} runs each; "
          f"target under {TARGET_MS:g} ms for `stead --help` and `stead runs ls`, "
          f"{WORKER_TARGET_MS:g} ms for `stead worker` to its first claimed run; load average "
          f"(1/5/15 min) {load_before} at the start, {load_after} at the end\n")
    print(head)
    print("|" + "---|" * (len(labels) + 1))
    for name in [*COMMANDS, *WORKERS]:
        cells = [f"{min(results[label][name]):.0f} / {statistics.median(results[label][name]):.0f}"
                 for label in labels]
        print(f"| `{name}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
