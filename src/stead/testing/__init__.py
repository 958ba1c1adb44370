"""Testing tools for stead users: crash your own workflows on purpose.

    from stead.testing import crash_matrix, Services, Event

`crash_matrix` kills a real worker at every boundary of a run and reports what
each recovery did (`stead chaos` on the command line, the `crash_matrix`
fixture of `stead.testing.pytest_plugin` in pytest); `stale_worker` gives a
test a worker whose lease was taken over; `CrashingStore` kills a worker at a
journal write of your choosing (see `stead.testing.crash`). `assert_replays`
and `check_migration` replay exported histories dry against new code, as
`stead replay-check` does (see `stead.testing.replays`).
"""

from stead.records import Boundary
from stead.testing.crash import CrashingStore, CrashPoint, DelegatingStore, kill_process
from stead.testing.hooks import Event, Services, Waiting
from stead.testing.matrix import crash_matrix
from stead.testing.points import Point
from stead.testing.replays import (
    assert_replays,
    check_migration,
    check_migration_async,
    load_exports,
    replay_check,
)
from stead.testing.report import EffectCalls, MatrixReport, PointResult
from stead.testing.stale import StaleWorker, stale_worker

__all__ = [
    "Boundary",
    "CrashPoint",
    "CrashingStore",
    "DelegatingStore",
    "EffectCalls",
    "Event",
    "MatrixReport",
    "Point",
    "PointResult",
    "Services",
    "StaleWorker",
    "Waiting",
    "assert_replays",
    "check_migration",
    "check_migration_async",
    "crash_matrix",
    "kill_process",
    "load_exports",
    "replay_check",
    "stale_worker",
]
