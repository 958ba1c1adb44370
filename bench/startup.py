"""`python -m bench.startup [--runs N] [--src DIR ...]`

The CPU time (user + system) a fresh process spends to start: `import stead`,
`stead --help`, `stead runs ls` on a small SQLite database, and a few other
commands. CPU time, not wall time, because this box is shared: other
processes slow a command's wall clock down, much less the CPU it uses itself.
Each command runs `--runs` times; the table shows the least and the median.

`--src DIR` measures the package in `DIR/src` instead (put first on
`PYTHONPATH`), so a checkout of another commit (`git archive REV | tar -x -C
DIR`) can be measured in the same run, with the same interpreter and
libraries, for a before and after. The target is `stead runs ls` and `stead
--help` under 150 ms.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET_MS = 150.0

COMMANDS: dict[str, list[str]] = {
    "python (nothing imported)": ["-c", "pass"],
    "import stead": ["-c", "import stead"],
    "stead --help": ["-m", "stead", "--help"],
    "stead runs ls": ["-m", "stead", "runs", "ls"],
    "stead runs ls --stranded": ["-m", "stead", "runs", "ls", "--stranded"],
    "stead db prune --help": ["-m", "stead", "db", "prune", "--help"],
    "stead worker --help": ["-m", "stead", "worker", "--help"],
}


def cpu_ms(argv: list[str], env: dict[str, str], cwd: str) -> float:
    """The CPU time of one child process running `argv`, in milliseconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return 1000 * ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))


def measure(src: Path | None, runs: int, folder: str) -> dict[str, list[float]]:
    env = {**os.environ, "STEAD_DATABASE_URL": f"sqlite:///{folder}/stead.db"}
    # As a user's install runs: with compiled bytecode cached (pip compiles it
    # at install), not compiling every module at every start.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src / "src"), env.get("PYTHONPATH", "")])
    for args in COMMANDS.values():  # writes the bytecode cache, not measured
        cpu_ms([sys.executable, *args], env, folder)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(runs):
        # Taking turns spreads drift in the box's load over every command.
        for name, args in COMMANDS.items():
            times[name].append(cpu_ms([sys.executable, *args], env, folder))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--src", action="append", type=Path, default=[],
                        help="Also measure the checkout at DIR (repeatable).")
    options = parser.parse_args()
    trees: list[tuple[str, Path | None]] = [("this checkout", None)]
    trees += [(str(path), path) for path in options.src]
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([sys.executable, "-m", "stead", "--db", f"sqlite:///{folder}/stead.db",
                        "db", "migrate"], check=True, capture_output=True)
        results = {label: measure(src, options.runs, folder) for label, src in trees}
    labels = list(results)
    head = "| command | " + " | ".join(f"{label}: least / median ms" for label in labels) + " |"
    print(f"CPU ms (user+sys) of a fresh process, {options.runs} runs each; "
          f"target under {TARGET_MS:g} ms for `stead --help` and `stead runs ls`\n")
    print(head)
    print("|" + "---|" * (len(labels) + 1))
    for name in COMMANDS:
        cells = [f"{min(results[label][name]):.0f} / {statistics.median(results[label][name]):.0f}"
                 for label in labels]
        print(f"| `{name}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
