"""What the crash matrix found: one `PointResult` per point, gathered in a
`MatrixReport`, printable as text (`stead chaos`) or Markdown (docs)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from stead.testing.points import Point

# How a point's run may end and still pass.
SAME = "same as the reference"
STOPPED = "stopped for a human (outcome_unknown), nothing sent twice"


@dataclasses.dataclass(frozen=True)
class EffectCalls:
    """The calls an outside service received under one effect key. `effect`
    is the effect's name, or None when no effect of the run has this key (a
    call to the outside made outside `run.effect`)."""

    key: str
    calls: int
    effect: str | None
    idempotent: bool = False

    @property
    def ok(self) -> bool:
        # An idempotent effect is resent with the same key; the service dedups.
        return self.calls <= 1 or (self.effect is not None and self.idempotent)

    def __str__(self) -> str:
        name = self.effect or f"key {self.key} (no effect)"
        resent = " (idempotent: resent, same key)" if self.calls > 1 and self.ok else ""
        return f"{name}: {self.calls}{resent}"


@dataclasses.dataclass(frozen=True)
class PointResult:
    """A point of the matrix and what its run did. `verdict` is `SAME`,
    `STOPPED`, or what differed; `events_once` is None when nothing was
    delivered; `recovered_in` is the seconds from the worker's death to the
    run's end (None for the reference and for a point not reached)."""

    point: Point
    status: str
    verdict: str
    same_result: bool
    same_state: bool
    calls: tuple[EffectCalls, ...]
    events_once: bool | None
    recovered_in: float | None
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclasses.dataclass(frozen=True)
class MatrixReport:
    """The whole matrix: the reference run, then every point."""

    app: str
    workflow: str
    args: list[Any]
    kwargs: Mapping[str, Any]
    database: str  # the kind of database (SQLite, PostgreSQL), never its URL
    reference: PointResult
    points: tuple[PointResult, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return self.reference.ok and all(p.ok for p in self.points)

    @property
    def failures(self) -> list[PointResult]:
        return [p for p in (self.reference, *self.points) if not p.ok]

    def assert_ok(self) -> None:
        """Raise `AssertionError` naming every failing point."""
        if not self.ok:
            raise AssertionError(self.summary() + "\n" + "\n".join(
                _failure(p) for p in self.failures))

    def call(self) -> str:
        arguments = [json.dumps(a) for a in self.args]
        arguments += [f"{k}={json.dumps(v)}" for k, v in self.kwargs.items()]
        return f"{self.app} {self.workflow}({', '.join(arguments)})"

    def summary(self) -> str:
        failed = len(self.failures)
        return (f"crash matrix of {self.call()} on {self.database}: {len(self.points)} "
                f"points, {failed} failed, in {self.seconds:.0f} s")

    def text(self) -> str:
        lines = [self.summary()]
        for number, p in enumerate((self.reference, *self.points)):
            mark = "ok  " if p.ok else "FAIL"
            lines.append(f"{mark} {number:>3}. killed {p.point.where}")
            lines.append(f"          {_outcome(p)}")
            lines += [f"          ! {problem}" for problem in p.problems]
        return "\n".join(lines)

    def markdown(self) -> str:
        lines = [
            f"`{self.call()}` on {self.database}: {len(self.points)} points, "
            f"{len(self.failures)} failed.",
            "",
            "| # | the worker was killed | run | result, task state | calls per effect key "
            "| events consumed once | recovered in | |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for number, p in enumerate((self.reference, *self.points)):
            same = "equal" if p.same_result and p.same_state else (
                "—" if p.verdict == STOPPED else
                "result differs" if not p.same_result else "task state differs")
            events = "—" if p.events_once is None else ("yes" if p.events_once else "**no**")
            took = "—" if p.recovered_in is None else f"{p.recovered_in:.1f} s"
            verdict = "ok" if p.ok else "**FAIL**: " + "; ".join(p.problems)
            calls = ", ".join(str(c) for c in p.calls) or "—"
            lines.append(f"| {number} | {_md(p.point.where)} | {p.status} | {same} | "
                         f"{_md(calls)} | {events} | {took} | {_md(verdict)} |")
        return "\n".join(lines)


def _outcome(p: PointResult) -> str:
    calls = ", ".join(str(c) for c in p.calls) or "no effect calls"
    events = "" if p.events_once is None else (
        "; events consumed once" if p.events_once else "; an event was NOT consumed once")
    took = "" if p.recovered_in is None else f"; recovered in {p.recovered_in:.1f} s"
    return f"{p.status}, {p.verdict}; {calls}{events}{took}"


def _failure(p: PointResult) -> str:
    return f"killed {p.point.where}: " + "; ".join(p.problems)


def _md(text: str) -> str:
    return text.replace("|", "\\|")
