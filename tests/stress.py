"""How the suite fits the machine it runs on.

- The quick set and the full set: `pytest` alone runs the quick set, every
  test not marked `slow` (process-level, crash, storm and browser tests);
  `pytest --full` runs them all (CI runs the quick set, then `--full -m
  slow`). Naming files or `-m` runs what is named. A property test tries a
  quarter of its examples in the quick set (`examples`).
- Deadlines scale with the machine by themselves: `slow()` is how much
  slower than a quiet box this one is taken to be, from its load average
  per core (and STEAD_TEST_SLOW, if higher): every deadline a test waits on
  is multiplied by it, so a busy laptop waits longer instead of failing.
- The stress pass: the tests run while CPU-bound processes, one per core,
  share the machine (`pytest --stress`, or CI_STRESS=1), deadlines scaled by
  at least 4. A test that passes only on a quiet box fails here. Each hog
  spins until its parent (pytest) is gone, so a pytest killed outright
  leaves none behind."""

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
    """How much slower than a quiet developer box this one is taken to be:
    the factor every deadline a test waits on is multiplied by. One more
    than the load average per core (a box whose cores are all busy runs a
    test's processes about twice as slowly), at most `_MOST`; or
    STEAD_TEST_SLOW, if set higher. Read when asked, so a deadline made
    later in a session sees the load then, and the stress pass, which sets
    STEAD_TEST_SLOW at start-up, is seen."""
    try:
        given = float(os.environ.get("STEAD_TEST_SLOW") or 1)
    except ValueError:
        raise pytest.UsageError("STEAD_TEST_SLOW must be a number, e.g. 3") from None
    return max(1.0, given, _load_factor())


# The most the load alone stretches a deadline: a hang must still fail.
_MOST = 6.0


def _load_factor() -> float:
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average here
        return 1.0
    return min(_MOST, 1.0 + load / (os.cpu_count() or 1))


FULL_ENV = "STEAD_TEST_FULL"


def add_full_option(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full", action="store_true", default=False,
        help="run the full set: the slow process-level, crash, storm and browser tests too "
             "(marked slow; CI runs them), and every example of each property test",
    )


def full() -> bool:
    """Whether this is the full set (`pytest --full`)."""
    return os.environ.get(FULL_ENV) == "1"


def examples(n: int) -> int:
    """How many examples a property test tries: `n` in the full set, a
    quarter of them (at least 10) in the quick one."""
    return n if full() else max(10, n // 4)


def leave_out_slow(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The quick set: a bare `pytest` leaves the tests marked slow out
    (deselected, and said so), unless --full, --stress or `-m` chose."""
    named = config.args_source != pytest.Config.ArgsSource.TESTPATHS
    if full() or wanted(config) or config.getoption("-m") or named:
        return
    slow_items = [item for item in items if item.get_closest_marker("slow") is not None]
    if not slow_items:
        return
    kept = [item for item in items if item.get_closest_marker("slow") is None]
    config.hook.pytest_deselected(items=slow_items)
    items[:] = kept
    config.stash[_LEFT_OUT] = len(slow_items)


def left_out(config: pytest.Config) -> str | None:
    n = config.stash.get(_LEFT_OUT, 0)
    if not n:
        return None
    return (f"quick set: {n} slow test(s) left out (process-level, crash, storm, browser); "
            "`pytest --full` runs everything, as CI does")


_LEFT_OUT = pytest.StashKey[int]()


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


def report(config: pytest.Config) -> list[str]:
    lines = [f"deadlines x{slow():.1f} (load {_load_text()}; STEAD_TEST_SLOW "
             f"{os.environ.get('STEAD_TEST_SLOW') or 'unset'})"]
    hogs = config.stash.get(_HOGS, 0)
    if hogs:
        lines.append(f"stress: {hogs} CPU-bound processes shared the machine")
    if full():
        lines.append("full set: every test, every example")
    return lines


def _load_text() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f} on {os.cpu_count() or 1} core(s)"
    except OSError:
        return "unknown"


_HOGS = pytest.StashKey[int]()
