"""The stress pass: the tests run while CPU-bound processes, one per core,
share the machine (`pytest --stress`, or CI_STRESS=1), with every process
test's deadline scaled by STEAD_TEST_SLOW (4 unless set; see
tests/workers/procs.py). A test that passes only on a quiet box fails here.

Each hog spins until its parent (pytest) is gone, so a pytest killed
outright leaves none behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Spin, and look now and then whether pytest is still there.
_HOG = (
    "import os, sys\n"
    "parent = int(sys.argv[1])\n"
    "while os.getppid() == parent:\n"
    "    for _ in range(1_000_000):\n"
    "        pass\n"
)
SLOW_UNDER_STRESS = "4"


def slow() -> float:
    """How much slower than a quiet developer box this one is taken to be
    (STEAD_TEST_SLOW, e.g. 3 on a loaded CI box; 1 unless set): the factor
    every deadline a test waits on is multiplied by. Read when asked, so
    the stress pass, which sets it at start-up, is seen."""
    try:
        return max(1.0, float(os.environ.get("STEAD_TEST_SLOW") or 1))
    except ValueError:
        raise pytest.UsageError("STEAD_TEST_SLOW must be a number, e.g. 3") from None


def add_option(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stress", action="store_true", default=False,
        help="run while one CPU-bound process per core shares the machine "
             "(also CI_STRESS=1); deadlines scale by STEAD_TEST_SLOW, 4 unless set",
    )


def wanted(config: pytest.Config) -> bool:
    return bool(config.getoption("--stress")) or os.environ.get("CI_STRESS") == "1"


def start(config: pytest.Config) -> None:
    """Start the hogs (stopped when pytest ends) and scale the deadlines."""
    os.environ.setdefault("STEAD_TEST_SLOW", SLOW_UNDER_STRESS)
    hogs = [subprocess.Popen([sys.executable, "-c", _HOG, str(os.getpid())])
            for _ in range(os.cpu_count() or 1)]

    def stop() -> None:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()

    config.add_cleanup(stop)
    config.stash[_HOGS] = len(hogs)


def report(config: pytest.Config) -> str | None:
    hogs = config.stash.get(_HOGS, 0)
    if not hogs:
        return None
    return (f"stress: {hogs} CPU-bound processes shared the machine, "
            f"deadlines x{os.environ.get('STEAD_TEST_SLOW')}")


_HOGS = pytest.StashKey[int]()
