"""Schedules: which ticks are due (pure, hypothesis), each tick fired once by
workers firing at once on both stores, missed ticks skipped, run once or
all, and a clock jumping back firing nothing twice. The three worker
processes with a jumping clock are in test_schedule_processes.py."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stead
from stead.records import Missed, ScheduleRow
from stead.schedules import Schedule
from tests import stress

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()


def _sched(missed: Missed, cron: str = "*/5 * * * *", grace: float = 10.0) -> Schedule:
    return Schedule("s", cron, "wf", 1, missed, grace)


def test_a_schedule_first_seen_fires_nothing_and_waits_for_its_next_tick() -> None:
    ticks, following = _sched(Missed.ALL).due(None, START + 1)
    assert ticks == [] and following == START + 300


@settings(max_examples=stress.examples(300), deadline=None)
@given(missed=st.sampled_from(list(Missed)), ticks_late=st.integers(0, 400),
       seconds=st.floats(0, 299.9))
def test_due_ticks_follow_the_missed_policy(missed: Missed, ticks_late: int,
                                            seconds: float) -> None:
    sched = _sched(missed)
    stored = ScheduleRow("s", sched.cron, START, START)
    now = START + ticks_late * 300 + seconds
    fired, following = sched.due(stored, now)
    every = [START + i * 300 for i in range(ticks_late + 1)]
    assert all(t >= START for t in fired) and fired == sorted(set(fired))
    if missed == Missed.ALL:
        assert fired == every[:len(fired)]
        assert len(fired) == min(len(every), 100)
        assert following == (every[100] if len(every) > 100 else START + (ticks_late + 1) * 300)
        return
    assert following == every[-1] + 300  # the next tick to come
    if missed == Missed.ONCE or now - every[-1] <= sched.grace:
        assert fired == [every[-1]]
    else:
        assert fired == []


def test_a_bad_cron_or_policy_is_refused() -> None:
    app = stead.App("t")
    with pytest.raises(stead.InvalidSchedule, match="not a cron expression"):
        app.schedule("every five minutes")
    with pytest.raises(stead.InvalidSchedule, match="missed is one of"):
        app.schedule("* * * * *", missed="sometimes")


def _tick_app(seen: list[str]) -> tuple[stead.App, Any]:
    app = stead.App("ticks")

    @app.schedule("* * * * *", missed="all")
    @app.workflow()
    async def every_minute(run: stead.Run, tick: str) -> str:
        seen.append(tick)
        return tick

    return app, every_minute


async def _fire_at_once(stores: list[stead.Store], sched: Schedule) -> int:
    made = await asyncio.gather(*(s.fire_schedule(sched.name, sched.cron, sched.due,
                                                  sched.new_run) for s in stores))
    return sum(len(started) for started, _next in made)


async def test_each_tick_is_fired_once_by_stores_firing_at_once(
    db_url: str, clock: stead.FakeClock,
) -> None:
    stores = [await stead.open_store(db_url, clock=clock, lease_clock=clock) for _ in range(3)]
    try:
        app, _wf = _tick_app([])
        [sched] = app.schedules
        clock.t = START + 30
        assert await _fire_at_once(stores, sched) == 0  # first seen: from the next tick on
        fired = 0
        for jump in (40, 1, 60, 60 * 10, -60 * 5, 30, 60 * 7, -3600, 3600 + 60):
            clock.advance(jump)
            fired += await _fire_at_once(stores, sched)
        runs = await stores[0].list_runs(limit=1000)
        tasks = Counter(r.task_id for r in runs)
        assert set(tasks.values()) == {1}, tasks
        assert fired == len(runs)
        # Every minute from the first tick to the clock's furthest point, once.
        expected = {sched.new_run(START + 60 * i).task_id
                    for i in range(1, int((clock.t - START) // 60) + 1)}
        assert set(tasks) == expected
    finally:
        for s in stores:
            await s.close()


@pytest.mark.parametrize(("missed", "runs"), [("skip", 0), ("once", 1), ("all", 10)])
async def test_missed_ticks_after_downtime(
    fstore: stead.Store, clock: stead.FakeClock, missed: str, runs: int,
) -> None:
    app = stead.App("t")

    @app.schedule("* * * * *", missed=missed, grace=5)
    async def report(run: stead.Run, tick: str) -> str:
        return tick

    [sched] = app.schedules
    clock.t = START + 1
    await fstore.fire_schedule(sched.name, sched.cron, sched.due, sched.new_run)
    clock.advance(60 * 10 - 1 + 30)  # ten ticks passed while no worker ran
    started, following = await fstore.fire_schedule(sched.name, sched.cron, sched.due,
                                                   sched.new_run)
    assert len(started) == runs
    assert following == START + 60 * 11
    if missed == "once":
        assert started[0][0] == START + 600  # the latest tick missed


async def test_a_worker_fires_the_schedule_and_runs_the_tick(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    seen: list[str] = []
    app, _wf = _tick_app(seen)
    clock.t = START + 59
    worker = stead.Worker(app, fstore)
    await worker.run_until_idle()
    assert seen == []
    clock.advance(2)
    await worker.run_until_idle()
    assert seen == ["2026-01-01T00:01:00+00:00"]
    [run] = await stead.Client(fstore, app).list_runs()
    assert (run.task_id, run.status) == ("schedule:every_minute@2026-01-01T00:01:00+00:00",
                                         "completed")
    [row] = await fstore.list_schedules()
    assert row.next_tick == START + 120
