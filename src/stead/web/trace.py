"""A run's trace: each step, model call, effect, wait and sleep of a page of
its journal as a bar on one time axis, with its duration, its outcome and
whether a takeover fell inside it, a mark where each takeover claimed the
run, and the time the run waited for its first claim. The run page draws it
as server-rendered SVG (no script: it passes the dashboard's CSP).

A call's records share its address: its bar runs from its first record to
its last. A call journaled as one record (most steps: the result is its only
record) began when the call before it ended, so its bar starts at the
previous record's time (and, journaled in a later epoch than that record,
it spanned a takeover); the first call began at the run's first claim. Until
then the run was queued: that is a bar of its own (`Trace.queued`), not part
of the first call's. A call whose last record is still in flight (an
effect's intent, a step started, a wait open) runs to now while the run is
live.

A takeover's mark stands where the new worker claimed the run
(`ResumeDetails.claimed_at`), not where its resume record was written (with
its first write, after replay and the call it made live): a call that began
after that claim ran wholly after the takeover. Records older than
`claimed_at` are marked at their own time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from stead.records import Record, RecordKind, RecordStatus, ResumeRecord
from stead.views import runs_view

DRAWN = frozenset({RecordKind.STEP, RecordKind.LLM, RecordKind.EFFECT, RecordKind.WAIT,
                   RecordKind.SLEEP})
IN_FLIGHT = frozenset({RecordStatus.STARTED, RecordStatus.INTENT, RecordStatus.ACCEPTED,
                       RecordStatus.OPEN})
FAILED = frozenset({RecordStatus.ERROR, RecordStatus.EXPIRED, RecordStatus.REVOKED})
WIDTH = 1000.0  # the axis in SVG user units; each bar's SVG stretches to its cell
NARROWEST = 2.0  # an instant call is still a visible tick


@dataclasses.dataclass(frozen=True)
class Bar:
    seq: int  # its first record in the journal
    kind: RecordKind
    name: str
    outcome: str  # ok / failed / unknown / open, a CSS class too
    start: float
    end: float
    attempts: int
    epochs: tuple[int, ...]
    taken_over: bool  # a takeover resumed the run while this call was open
    x: float = 0.0
    width: float = 0.0

    @property
    def duration(self) -> str:
        return runs_view.ago(self.end - self.start)


@dataclasses.dataclass(frozen=True)
class Mark:
    """Where a takeover claimed the run (`at`), on the axis."""

    resume: ResumeRecord
    at: float
    x: float = 0.0


@dataclasses.dataclass(frozen=True)
class Span:
    """A stretch of the axis that is no call: the time a run was queued."""

    start: float
    end: float
    x: float = 0.0
    width: float = 0.0

    @property
    def duration(self) -> str:
        return runs_view.ago(self.end - self.start)


@dataclasses.dataclass(frozen=True)
class Trace:
    bars: tuple[Bar, ...]
    marks: tuple[Mark, ...]
    ticks: tuple[tuple[float, str], ...]  # (x, the offset from the run's start)
    start: float
    end: float
    # From the run's creation to its first claim, on a page that begins with
    # its first record (None: elsewhere, or a run stored without that time).
    queued: Span | None = None


def claimed(r: ResumeRecord) -> float:
    """When the takeover `r` records claimed the run (its own time, for a
    record older than `claimed_at`)."""
    at = r.details.claimed_at
    return r.at if at is None else at


def _outcome(last: Record, live: bool) -> str:
    if last.status in IN_FLIGHT:
        return "open" if live else "unknown"
    if last.status == RecordStatus.UNKNOWN:
        return "unknown"
    return "failed" if last.status in FAILED else "ok"


def _bars(journal: Sequence[Record], begun: float, now: float, live: bool,
          marks: Sequence[Mark]) -> list[Bar]:
    calls: dict[str, list[Record]] = {}
    # When the record before each call's first was written, and in which epoch.
    before: dict[str, tuple[float, int]] = {}
    previous = (begun, journal[0].epoch if journal else 1)
    for r in journal:
        if r.kind in DRAWN and r.addr not in calls:
            calls[r.addr] = []
            before[r.addr] = previous
        if r.kind in DRAWN:
            calls[r.addr].append(r)
        previous = (r.at, r.epoch)
    bars = []
    for addr, recs in calls.items():
        first, last = recs[0], recs[-1]
        began, epoch = before[addr]
        whole = len(recs) > 1 or first.status in IN_FLIGHT
        start = first.at if whole else began
        outcome = _outcome(last, live)
        end = now if outcome == "open" else last.at
        # A call journaled once, in a later epoch than the record before it,
        # began under the holder that died and ended under the one that took over.
        epochs = tuple(sorted({r.epoch for r in recs} | (set() if whole else {epoch})))
        over = len(epochs) > 1 or any(start < m.at < end for m in marks)
        bars.append(Bar(first.seq, first.kind, first.name, outcome, min(start, end), end,
                        max(r.attempt for r in recs), epochs, over))
    return bars


def trace(journal: Sequence[Record], resumes: Sequence[ResumeRecord], *, created_at: float,
          now: float, live: bool, started_at: float | None = None) -> Trace:
    """The trace of `journal` (a page of a run's journal, in seq order) of a
    run created at `created_at` and first claimed at `started_at` (None: not
    known)."""
    first = not journal or journal[0].seq == 0
    queued = None
    if first and started_at is not None and started_at > created_at:
        queued = Span(created_at, started_at)
    marks = [Mark(r, claimed(r)) for r in resumes]
    begun = (created_at if queued is None else queued.end) if first else journal[0].at
    bars = _bars(journal, begun, now, live, marks)
    if not bars:
        return Trace((), (), (), created_at, created_at)
    start = min([b.start for b in bars] + ([] if queued is None else [queued.start]))
    end = max(max(b.end for b in bars), start + 1e-3)
    scale = WIDTH / (end - start)

    def x(t: float) -> float:
        return round((t - start) * scale, 2)

    def width(a: float, b: float) -> float:
        return max(round((b - a) * scale, 2), NARROWEST)

    placed = tuple(dataclasses.replace(b, x=min(x(b.start), WIDTH - NARROWEST),
                                       width=width(b.start, b.end)) for b in bars)
    shown = tuple(dataclasses.replace(m, x=x(m.at)) for m in marks if start <= m.at <= end)
    ticks = tuple((WIDTH * i / 4, runs_view.offset(start + (end - start) * i / 4 - created_at))
                  for i in range(5))
    if queued is not None:
        queued = dataclasses.replace(queued, x=x(queued.start),
                                     width=width(queued.start, queued.end))
    return Trace(placed, shown, ticks, start, end, queued)
