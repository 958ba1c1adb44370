"""The crash matrix's points: every boundary of one run, found from the
journal writes of its uninterrupted reference run.

Each journal write gives two points, just before it commits and just after.
A write that journals an effect's phase after its intent (accepted, ok, error,
unknown) is reached from inside the effect's function: its before-point kills
the worker inside the send, counted by the effect's name (`CrashPoint(name=)`).
Each wait gives two more: killed while the run is suspended on it, and killed
as the worker wakes for the event delivered to it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from stead.records import Boundary, RecordKind, RecordStatus

# Records that ride along with the next write; they do not name it.
_RIDERS = {RecordKind.NOW, RecordKind.UUID, RecordKind.RANDOM}


@dataclasses.dataclass(frozen=True)
class Point:
    """One place to kill the worker. `crash` is the worker's crash point
    (`before:N[:name]`, `after:N`), None when the matrix kills it from
    outside (`waiting`, `delivery`) or not at all (`none`); `wait` is the
    1-based number of the wait a `waiting` or `delivery` point is about."""

    boundary: Boundary
    where: str
    crash: str | None = None
    wait: int | None = None


REFERENCE = Point(Boundary.NONE, "nowhere: the uninterrupted reference run")


def describe(entry: dict[str, Any]) -> str:
    """What one journal write of the tally journals, for a person."""
    records = [(k, n, s) for k, n, s in entry["records"] if k not in _RIDERS]
    parts = [f"{kind} {name}" + ("" if status == RecordStatus.OK and kind in (
        RecordKind.STEP, RecordKind.LLM) else f": {status}") for kind, name, status in records]
    if entry.get("finish"):
        parts.append(f"the run's end ({entry['finish']})")
    return ", ".join(parts) or "the run suspends"


def enumerate_points(tally: Sequence[dict[str, Any]]) -> list[Point]:
    """Every point of a run whose reference journal writes are `tally`
    (one entry per write, as the worker process writes it)."""
    points: list[Point] = []
    named: Counter[str] = Counter()  # writes journaling a record of that name, so far
    sent: set[str] = set()  # effects whose intent is journaled and outcome is not
    opened: list[str] = []  # waits opened, in order
    placed = 0  # waits whose points are placed (after the write that suspends on them)
    for number, entry in enumerate(tally, 1):
        what = describe(entry)
        names = {name for _kind, name, _status in entry["records"]}
        named.update(names)
        in_send = [name for kind, name, status in entry["records"]
                   if kind == RecordKind.EFFECT and status != RecordStatus.INTENT
                   and name in sent]
        if in_send:
            name = in_send[0]
            points.append(Point(
                Boundary.IN_SEND,
                f"inside effect {name}'s send, before write {number} commits ({what})",
                f"before:{named[name]}:{name}"))
        else:
            points.append(Point(Boundary.BEFORE, f"before write {number} commits ({what})",
                                f"before:{number}"))
        points.append(Point(Boundary.AFTER, f"after write {number} commits ({what})",
                            f"after:{number}"))
        for kind, name, status in entry["records"]:
            if kind == RecordKind.EFFECT:
                if status == RecordStatus.INTENT:
                    sent.add(name)
                elif status in (RecordStatus.OK, RecordStatus.ERROR, RecordStatus.UNKNOWN):
                    sent.discard(name)
            if kind == RecordKind.WAIT and status == RecordStatus.OPEN:
                opened.append(name)
        if _suspends(entry) or number == len(tally):
            points += [p for n, kind in enumerate(opened[placed:], placed + 1)
                       for p in _wait_points(n, kind)]
            placed = len(opened)
    return points


def _suspends(entry: dict[str, Any]) -> bool:
    """A write of no call of its own that does not end the run: a suspension."""
    return not entry.get("finish") and all(k in _RIDERS for k, _n, _s in entry["records"])


def _wait_points(number: int, kind: str) -> list[Point]:
    return [
        Point(Boundary.WAITING,
              f"while suspended on wait {kind} (the event comes while no worker runs)",
              wait=number),
        Point(Boundary.DELIVERY, f"as the worker wakes for the event delivered to wait {kind}",
              wait=number),
    ]
