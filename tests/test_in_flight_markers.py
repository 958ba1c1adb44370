"""The started markers a lease renewal stores with a run: which of them a
takeover counts as an attempt that died in flight (the process-level tests
are in test_crash_processes.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import stead
from stead.records import Fence, Record, RecordKind, RecordStatus
from stead.replay import Journal, markers_from, markers_text
from tests.helpers import Crash


def _marker(addr: str, attempt: int, name: str = "s", epoch: int = 1) -> Record:
    return Record(-1, addr, attempt, RecordKind.STEP, name, "d", RecordStatus.STARTED, "{}",
                  epoch, 0.0)


def _journal(statuses: list[RecordStatus], addr: str = "0") -> Journal:
    """Attempts 1.. of the step at `addr`, one record each."""
    payload = {RecordStatus.OK: "1", RecordStatus.STARTED: "{}",
               RecordStatus.ERROR: '{"type": "E", "message": "", "retry_at": 0}'}
    return Journal("r1", [
        Record(seq, addr, seq + 1, RecordKind.STEP, "s", "d", status, payload[status], 1, 0.0)
        for seq, status in enumerate(statuses)])


def test_markers_round_trip_and_an_unreadable_value_is_ignored() -> None:
    markers = [_marker("0", 2), _marker("1.0", 1, "t", epoch=3)]
    assert markers_from("r1", markers_text(markers)) == markers
    assert markers_text([]) is None
    assert markers_from("r1", None) == []
    for bad in ("{", '[{"addr": "0"}]', '[{"addr": "0", "attempt": 1, "kind": "nope", '
                '"name": "s", "digest": "d", "epoch": 1}]', "7"):
        assert markers_from("r1", bad) == []


@given(journaled=st.lists(st.sampled_from([RecordStatus.ERROR, RecordStatus.STARTED]),
                          max_size=4),
       ended=st.booleans(), attempt=st.integers(1, 7))
def test_a_marker_counts_only_for_an_attempt_the_journal_knows_nothing_of(
    journaled: list[RecordStatus], ended: bool, attempt: int,
) -> None:
    statuses = [*journaled, RecordStatus.OK] if ended else journaled
    journal = _journal(statuses)
    journal.mark_in_flight([_marker("0", attempt)])
    assert journal.in_flight() == [_marker("0", attempt)]
    died = journal.died("0", RecordKind.STEP, "s", "d")
    assert died == (attempt if attempt > len(statuses) else None)
    # Asked once: the new attempt's own marker supersedes it.
    assert journal.died("0", RecordKind.STEP, "s", "d") is None
    assert journal.in_flight() == []


def test_a_marker_for_another_call_or_address_counts_nothing() -> None:
    journal = _journal([])
    journal.mark_in_flight([_marker("0", 1, "other"), _marker("1", 1)])
    assert journal.died("0", RecordKind.STEP, "s", "d") is None
    assert journal.died("2", RecordKind.STEP, "s", "d") is None
    assert journal.died("1", RecordKind.LLM, "s", "d") is None


def test_the_latest_marker_at_an_address_is_kept() -> None:
    journal = _journal([])
    journal.mark_in_flight([_marker("0", 3), _marker("0", 2)])
    assert journal.died("0", RecordKind.STEP, "s", "d") == 3


async def test_a_stale_marker_of_a_completed_step_never_makes_it_look_died(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    app = stead.App("stale-marker")
    ran: list[str] = []

    def a() -> str:
        ran.append("a")
        return "a"

    def b() -> str:
        ran.append("b")
        if ran.count("b") == 1:
            raise Crash()
        return "b"

    @app.workflow()
    async def pair(run: stead.Run) -> list[str]:
        return [await run.step("a", a, retry=stead.Retry(attempts=1)), await run.step("b", b)]

    client = stead.Client(fstore, app)
    info = await client.start(pair)

    # The worker dies in `b`; its last renewal had stored `a`'s marker, from
    # while `a` was in flight (with `retry=` of one attempt: counted, it would fail).
    first = stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30))
    await first.run_until_idle()
    [done] = await fstore.load_journal(info.run_id)
    row = await fstore.get_run(info.run_id)
    assert row.lease_owner is not None
    fence = Fence(info.run_id, row.epoch, row.lease_owner)
    stale = done.evolve(status=RecordStatus.STARTED, payload="{}")
    assert await fstore.renew([fence], 30, {fence: markers_text([stale])}) == []
    clock.advance(31)
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == ["a", "b"]
    assert ran == ["a", "b", "b"]
    assert [(r.name, r.attempt, r.status) for r in await client.journal(info.run_id)] == [
        ("a", 1, "ok"), ("b", 1, "ok")]
