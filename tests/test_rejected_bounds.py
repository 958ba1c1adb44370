"""Rejected events are bounded, on both stores: deliveries anyone can send
(junk to random run ids, wrong values to a known run) keep only the newest
rejected events, per run and in all for runs that do not exist, and count
the rest; an accepted event is never dropped, so its redelivery is still a
duplicate; `stead db prune` removes rejected events by age, with their run
and on their own."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from click.testing import CliRunner

import stead
from stead.cli import main
from stead.records import EventRow
from stead.store import _rejections
from tests.helpers import approval_app, waiting_for_approval

DAY = 86400.0
JUNK = 2000


def _stored_bytes(events: list[EventRow]) -> int:
    return sum(len(e.run_id) + len(e.event_id) + len(e.payload) + len(e.bind)
               + len(e.detail or "") + len(e.kind or "") + len(e.wait_id or "")
               for e in events)


async def test_junk_to_random_run_ids_keeps_a_bounded_number_of_rows(
    store: stead.Store,
) -> None:
    client = stead.Client(store)
    targets = [uuid.uuid4().hex for _ in range(JUNK)]
    junk = {"note": "x" * 3000}
    for run_id in targets:
        rejected = await client.deliver(run_id, event_id=uuid.uuid4().hex, kind="approval",
                                        payload=junk, token="guess")
        assert isinstance(rejected, stead.Rejected) and rejected.reason == "unknown_run"
    kept = [e for run_id in targets for e in await store.list_events(run_id)]
    assert len(kept) == _rejections.UNKNOWN_RUNS
    assert await store.rejected_dropped(None) == JUNK - _rejections.UNKNOWN_RUNS
    # What is kept of each is a digest: the whole of it stays under 1 KB a row.
    assert _stored_bytes(kept) < 1024 * _rejections.UNKNOWN_RUNS
    # The newest are the ones kept.
    assert {e.run_id for e in kept} == set(targets[-_rejections.UNKNOWN_RUNS:])


async def test_a_known_runs_rejected_events_are_capped_and_its_accepted_one_never_dropped(
    store: stead.Store,
) -> None:
    client, run_id, wait_id, token = await waiting_for_approval(store)
    rejected = _rejections.PER_RUN + 30
    for i in range(rejected // 2):
        verdict = await client.deliver(run_id, event_id=f"wrong-{i}", wait_id=wait_id,
                                       bind={"order_id": "o-2"}, token=token)
        assert isinstance(verdict, stead.Rejected), verdict
    accepted = await client.deliver(run_id, event_id="the-approval", wait_id=wait_id,
                                    payload={"ok": True}, bind={"order_id": "o-1"},
                                    token=token)
    assert isinstance(accepted, stead.Accepted)
    for i in range(rejected - rejected // 2):  # after it: already consumed
        verdict = await client.deliver(run_id, event_id=f"late-{i}", wait_id=wait_id,
                                       bind={"order_id": "o-1"}, token=token)
        assert isinstance(verdict, stead.Rejected), verdict
    events = await client.events(run_id)
    assert [e.event_id for e in events if e.verdict == "accepted"] == ["the-approval"]
    assert sum(e.verdict == "rejected" for e in events) == _rejections.PER_RUN
    assert {e.event_id for e in events} >= {f"late-{i}" for i in range(10)}
    assert await store.rejected_dropped(run_id) == rejected - _rejections.PER_RUN
    again = await client.deliver(run_id, event_id="the-approval", wait_id=wait_id,
                                 payload={"ok": True}, bind={"order_id": "o-1"},
                                 token=token)
    assert isinstance(again, stead.Duplicate)


async def test_prune_removes_old_rejected_events_on_their_own_and_with_their_run(
    db_url: str,
) -> None:
    clock = stead.FakeClock()
    store = await stead.open_store(db_url, clock=clock)
    try:
        client, run_id, wait_id, token = await waiting_for_approval(store)
        old_junk = uuid.uuid4().hex
        await client.deliver(old_junk, event_id="j-old", kind="approval")
        await client.deliver(run_id, event_id="wrong-old", wait_id=wait_id,
                             bind={"order_id": "o-2"}, token=token)
        clock.t += 31 * DAY
        new_junk = uuid.uuid4().hex
        await client.deliver(new_junk, event_id="j-new", kind="approval")
        await client.deliver(run_id, event_id="wrong-new", wait_id=wait_id,
                             bind={"order_id": "o-2"}, token=token)
        await client.deliver(run_id, event_id="ok", wait_id=wait_id, payload=True,
                             bind={"order_id": "o-1"}, token=token)

        dry = await stead.prune(store, 30 * DAY, dry_run=True)
        assert dry.rejected == 2 and dry.matched == 0
        report = await stead.prune(store, 30 * DAY)
        assert report.rejected == 2 and report.deleted == 0
        assert await store.list_events(old_junk) == []
        assert [e.event_id for e in await store.list_events(new_junk)] == ["j-new"]
        assert {e.event_id for e in await client.events(run_id)} == {"wrong-new", "ok"}
        assert (await client.get(run_id)).status != "cancelled"  # the live run is untouched

        # Finished and old, the run goes, and its events and tally with it.
        await stead.Worker(approval_app(), store).run_until_idle()
        assert (await client.get(run_id)).status == "completed"
        for i in range(_rejections.PER_RUN + 1):
            await client.deliver(run_id, event_id=f"after-{i}", wait_id=wait_id,
                                 token=token)
        assert await store.rejected_dropped(run_id) == 2
        clock.t += 31 * DAY
        gone = await stead.prune(store, 30 * DAY)
        assert gone.deleted == 1
        assert await store.list_events(run_id) == []
        assert await store.rejected_dropped(run_id) == 0
        assert await store.list_events(new_junk) == []
    finally:
        await store.close()


def test_db_prune_says_how_many_rejected_events_it_deleted(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/stead.db"

    async def junk() -> None:
        clock = stead.FakeClock()
        store = await stead.open_store(db, clock=stead.FakeClock(clock.now() - 40 * DAY))
        try:
            for i in range(3):
                await stead.Client(store).deliver(f"nobody-{i}", event_id="e", kind="x")
        finally:
            await store.close()

    asyncio.run(junk())
    runner = CliRunner()
    dry = runner.invoke(main, ["--db", db, "db", "prune", "--older-than", "30d", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "and 3 rejected event(s) received before then (dry run" in dry.output
    done = runner.invoke(main, ["--db", db, "db", "prune", "--older-than", "30d"])
    assert done.exit_code == 0, done.output
    assert "deleted 3 rejected event(s) received before then" in done.output


def test_events_ls_says_how_many_rejected_events_were_not_kept(sqlite_url: str) -> None:
    async def rejected() -> str:
        store = await stead.open_store(sqlite_url)
        try:
            client, run_id, wait_id, token = await waiting_for_approval(store)
            for i in range(_rejections.PER_RUN + 5):
                await client.deliver(run_id, event_id=f"w-{i}", wait_id=wait_id,
                                     bind={"order_id": "o-2"}, token=token)
            return run_id
        finally:
            await store.close()

    run_id = asyncio.run(rejected())
    out = CliRunner().invoke(main, ["--db", sqlite_url, "events", "ls", run_id])
    assert out.exit_code == 0, out.output
    lines = out.output.strip().splitlines()
    assert len(lines) == _rejections.PER_RUN + 1
    assert lines[-1].startswith("5 older rejected event(s) not kept")


def test_the_count_kept_of_events_to_unknown_runs_is_the_one_each_query_writes() -> None:
    """`trim_rejected_unknown` writes `UNKNOWN_RUNS` in its text (a statement
    with no parameters is planned once per PostgreSQL connection): the two
    must not drift apart."""
    from stead.store import sql_files

    for dialect in ("sqlite", "postgres"):
        sql = sql_files.queries(dialect)["trim_rejected_unknown"]
        code = " ".join(line for line in sql.splitlines() if not line.startswith("--"))
        assert f"OFFSET {_rejections.UNKNOWN_RUNS})" in code, (dialect, sql)
        assert "%(" not in code and ":" not in code, (dialect, sql)
