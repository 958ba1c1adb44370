"""Schedules: `@app.schedule("*/5 * * * *")` starts a run of a workflow at
every tick of a cron expression (croniter reads it, in UTC).

Exactly one run per tick, however many workers: the store keeps each
schedule's next tick not yet fired, and a worker fires by moving it forward
with compare-and-set in the transaction that starts the tick's runs
(`Store.fire_schedule`); the tick is also in the run's task id. What is
decided here is pure: which ticks are due at a given time, and what run a
tick starts.

Ticks that passed while no worker ran (downtime, or a clock that jumped
forward) are handled as the schedule's `missed` says: `skip` them (a tick
is fired only up to `grace` seconds late), run `once` for the latest of
them, or run `all` of them (at most `MAX_TICKS` per firing; the rest at the
next). A clock that jumps back fires nothing twice: the next tick stays
where it was.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

from stead import bounds, codec, errors, run_ids
from stead.records import Missed, NewRun, ScheduleRow

if TYPE_CHECKING:
    from croniter import croniter

# The most ticks one firing starts (missed="all"): a transaction stays small.
MAX_TICKS = 100


def _ticks(cron: str, t: float) -> croniter:
    """The ticks of `cron` around `t` (UTC)."""
    return _croniter()(cron, dt.datetime.fromtimestamp(t, dt.UTC))


def _croniter() -> type[croniter]:
    # croniter (with dateutil) costs tens of milliseconds to import: only an
    # app that declares a schedule pays for it, not every command.
    from croniter import croniter

    return croniter


def _after(cron: str, t: float) -> float:
    """The first tick of `cron` strictly after `t` (UTC)."""
    following: dt.datetime = _ticks(cron, t).get_next(dt.datetime)
    return following.timestamp()


def check(cron: str, missed: Missed | str, grace: float) -> Missed:
    """Raise `InvalidSchedule` unless `cron` is a cron expression, `missed`
    a policy and `grace` seconds >= 0; the policy as a `Missed` member."""
    if not isinstance(cron, str) or not _croniter().is_valid(cron):
        raise errors.InvalidSchedule(
            f"{cron!r} is not a cron expression (e.g. \"*/5 * * * *\": every five "
            "minutes; six fields: seconds last)")
    bounds.seconds(grace, "a schedule's grace", zero=True, error=errors.InvalidSchedule)
    return missed_policy(missed)


def missed_policy(value: Missed | str) -> Missed:
    """`value` as a `Missed` member; `InvalidSchedule` if it is none."""
    try:
        return Missed(value)
    except ValueError:
        raise errors.InvalidSchedule(
            f"missed is one of {', '.join(Missed)}, not {value!r}") from None


def tick_text(tick: float) -> str:
    """A tick as the scheduled workflow receives it: ISO 8601, UTC."""
    return dt.datetime.fromtimestamp(tick, dt.UTC).isoformat()


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Start `workflow@version` at every tick of `cron`; the run gets the tick
    (`tick_text`) as its one argument, and `schedule:<name>@<tick>` as its
    task id."""

    name: str
    cron: str
    workflow: str
    version: int
    missed: Missed = Missed.ONCE
    grace: float = 10.0
    tenant: str | None = None  # the tenant each run serves

    def __post_init__(self) -> None:
        object.__setattr__(self, "missed", check(self.cron, self.missed, self.grace))

    def due(self, current: ScheduleRow | None, now: float) -> tuple[list[float], float]:
        """The ticks to fire at `now` and the next tick not yet fired, given
        the stored schedule (None, or another cron: it starts from now)."""
        if current is None or current.cron != self.cron:
            return [], _after(self.cron, now)
        if now < current.next_tick:
            return [], current.next_tick
        if self.missed == Missed.ALL:
            passed: list[float] = []
            t = current.next_tick
            while t <= now and len(passed) < MAX_TICKS:
                passed.append(t)
                t = _after(self.cron, t)
            return passed, t  # past MAX_TICKS: the rest at the next firing
        latest = _at_or_before(self.cron, now)
        following = _after(self.cron, latest)
        if self.missed == Missed.ONCE or now - latest <= self.grace:
            return [latest], following
        return [], following  # skip: even the latest tick is too late

    def new_run(self, tick: float) -> NewRun:
        """The run a tick starts."""
        text = tick_text(tick)
        return NewRun(
            run_id=run_ids.new(tick), workflow=self.workflow, version=self.version,
            task_id=f"schedule:{self.name}@{text}",
            input=codec.dumps({"args": [text], "kwargs": {}}, what="a tick"),
            tenant=self.tenant,
        )


def _at_or_before(cron: str, t: float) -> float:
    """The latest tick of `cron` at or before `t` (croniter's previous tick
    is strictly before its start)."""
    previous: dt.datetime = _ticks(cron, t).get_prev(dt.datetime)
    following = _after(cron, previous.timestamp())
    return following if following <= t else previous.timestamp()
