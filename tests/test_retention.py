"""Retention, on both stores: over runs of mixed ages and statuses
(hypothesis), a prune deletes exactly the finished runs older than the
cutoff with no live parent and no effect of unknown outcome, in bounded
batches, exporting each first if asked; it never touches a live run.
`stead db prune` on top."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import AsyncIterator

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stead
from stead.cli import main
from stead.records import TERMINAL, ActionOutcome, ActionRow, Fence, NewRun, Record
from stead.retention import json_lines, parse_age

DAY = 86400.0
LIVE = ("pending", "running", "waiting", "outcome_unknown", "paused")
ENDED = ("completed", "failed", "cancelled", "revalidation_failed")
INPUT = '{"args":[],"kwargs":{}}'


def _effect(seq: int, status: str, epoch: int) -> Record:
    return Record(seq=seq, addr="0", attempt=1, kind="effect", name="charge", digest="d",
                  status=status, payload="{}", epoch=epoch, at=0.0)


@pytest.fixture
async def rstore(db_url: str) -> AsyncIterator[tuple[stead.Store, stead.FakeClock]]:
    clock = stead.FakeClock()
    s = await stead.open_store(db_url, clock=clock, lease_clock=clock)
    yield s, clock
    await s.close()


async def _make(store: stead.Store, clock: stead.FakeClock, status: str, at: float,
                effect: str | None, parent: str | None) -> str:
    """A run in `status`, last changed at `at`, with an effect whose last
    phase is `effect` (None: no effect), child of `parent`."""
    run_id = uuid.uuid4().hex
    workflow = f"wf{run_id[:8]}"  # its own workflow: a claim takes exactly this run
    clock.t = at
    await store.create_run(NewRun(run_id, workflow, 1, None, INPUT, parent_id=parent))
    if status == "pending":
        return run_id
    [row] = await store.claim("w", [f"{workflow}@1"], 10 * 365 * DAY, 1)
    fence = Fence(run_id, row.epoch, "w")
    if effect is not None:
        recs = [_effect(0, "intent", row.epoch)]
        if effect != "intent":
            recs.append(_effect(1, effect, row.epoch))
        await store.append(fence, recs)
    if status == "running":
        return run_id
    if status == "waiting":
        await store.suspend(fence, [], None, at + DAY, [])
    elif status == "cancelled":
        await store.cancel_run(run_id)
    else:
        await store.finish(fence, status, result="1" if status == "completed" else None)
    return run_id


spec = st.tuples(
    st.sampled_from(LIVE + ENDED),
    st.floats(0, 60),  # age in days
    st.sampled_from([None, None, "ok", "error", "reconciled", "intent", "unknown",
                     "accepted"]),
    st.one_of(st.none(), st.integers(0, 30)),  # the parent: an earlier run of the example
)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(spec, min_size=1, max_size=14), batch=st.integers(1, 5))
async def test_prune_deletes_exactly_the_old_finished_settled_runs(
    rstore: tuple[stead.Store, stead.FakeClock], specs: list[tuple[str, float, str | None,
                                                                    int | None]],
    batch: int,
) -> None:
    store, clock = rstore
    now = clock.t = max(clock.t, 1_700_000_000.0) + 1000 * DAY  # apart from earlier examples
    made: list[str] = []
    for status, age, effect, parent in specs:
        parent_id = made[parent % len(made)] if parent is not None and made else None
        made.append(await _make(store, clock, status, now - age * DAY, effect, parent_id))
    before = {r: await store.get_run(r) for r in made}
    journals = {r: await store.load_journal(r) for r in made}
    clock.t = now
    exported: list[dict[str, object]] = []
    report = await stead.prune(store, 30 * DAY, batch=batch,
                               export=lambda runs: exported.extend(r.to_json() for r in runs))

    def prunable(run_id: str) -> bool:
        row = before[run_id]
        parent = before.get(row.parent_id) if row.parent_id else None
        unknown = journals[run_id] and journals[run_id][-1].status in (
            "intent", "accepted", "unknown")
        return (row.status in TERMINAL and row.updated_at < now - 30 * DAY and not unknown
                and (parent is None or parent.status in TERMINAL))

    expected = {r for r in made if prunable(r)}
    gone = set()
    for run_id in made:
        try:
            row = await store.get_run(run_id)
        except stead.UnknownRun:
            gone.add(run_id)
            assert await store.load_journal(run_id) == []
            continue
        assert row == before[run_id], "a run that stays is untouched"
        assert await store.load_journal(run_id) == journals[run_id]
    assert gone == expected
    assert not any(before[r].live for r in gone), "never a live run"
    assert {e["run"]["run_id"] for e in exported} >= gone  # type: ignore[index]
    assert report.deleted >= len(gone)
    assert report.batches >= -(-report.deleted // batch)


async def test_a_dry_run_counts_and_deletes_nothing(
    rstore: tuple[stead.Store, stead.FakeClock],
) -> None:
    store, clock = rstore
    old = await _make(store, clock, "completed", clock.t, "ok", None)
    clock.advance(40 * DAY)
    report = await stead.prune(store, 30 * DAY, dry_run=True)
    assert (report.matched, report.deleted, report.dry_run) == (1, 0, True)
    assert (await store.get_run(old)).status == "completed"


async def test_an_export_holds_everything_stored_of_the_run(
    rstore: tuple[stead.Store, stead.FakeClock],
) -> None:
    store, clock = rstore
    old = await _make(store, clock, "completed", clock.t, "ok", None)
    clock.advance(40 * DAY)
    out = io.StringIO()
    report = await stead.prune(store, 30 * DAY, export=json_lines(out))
    assert (report.deleted, report.exported) == (1, 1)
    [line] = out.getvalue().splitlines()
    data = json.loads(line)
    assert data["run"]["run_id"] == old and data["run"]["status"] == "completed"
    assert [r["status"] for r in data["journal"]] == ["intent", "ok"]


@pytest.mark.parametrize(("text", "seconds"), [("30d", 30 * DAY), ("12h", 43200),
                                               ("90m", 5400), ("45s", 45), ("2w", 14 * DAY)])
def test_ages_read_as_seconds(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["30", "d", "-1d", "0d", "3 days", ""])
def test_a_bad_age_is_refused(text: str) -> None:
    with pytest.raises(stead.InvalidInput, match="not an age"):
        parse_age(text)


def test_stead_db_prune(db_url: str, tmp_path: object) -> None:
    import asyncio

    async def setup() -> None:
        store = await stead.open_store(db_url)
        try:
            clock = stead.FakeClock(store.clock.now() - 40 * DAY)
            old_store = await stead.open_store(db_url, clock=clock, lease_clock=clock)
            try:
                await _make(old_store, clock, "completed", clock.t, None, None)
                await _make(old_store, clock, "paused", clock.t, None, None)
            finally:
                await old_store.close()
        finally:
            await store.close()

    asyncio.run(setup())
    runner = CliRunner()
    dry = runner.invoke(main, ["--db", db_url, "db", "prune", "--older-than", "30d",
                               "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "1 finished run(s) older than 30d would be deleted" in dry.output
    export = f"{tmp_path}/old.jsonl"
    done = runner.invoke(main, ["--db", db_url, "db", "prune", "--older-than", "30d",
                                "--export", export])
    assert done.exit_code == 0, done.output
    assert "deleted 1 finished run(s)" in done.output and "exported 1" in done.output
    with open(export) as f:
        assert len(f.read().splitlines()) == 1
    bad = runner.invoke(main, ["--db", db_url, "db", "prune", "--older-than", "soon"])
    assert bad.exit_code != 0 and "not an age" in bad.output


old_app = stead.App("prunes")
new_app = stead.App("prunes")


@old_app.workflow(version=1)
async def note(run: stead.Run, text: str) -> str:
    return await run.step("upper", str.upper, text)


@new_app.workflow(name="note", version=2)
async def note_v2(run: stead.Run, text: str) -> str:
    return await run.step("upper", str.upper, text) + "!"


@new_app.migration("note", from_version=1, to_version=2)
def note_to_v2(old: stead.MigrationView) -> stead.Migrated:
    return stead.Migrated(args=list(old.args))


async def test_prune_takes_a_run_s_migrations_lineage_and_audit_with_it(
    rstore: tuple[stead.Store, stead.FakeClock],
) -> None:
    store, clock = rstore
    migrated = await stead.Client(store, old_app).start("note", "a")
    client = stead.Client(store, new_app)
    assert (await client.migrate(migrated.run_id, to=2, by="ops")).applied
    parent = await client.start("note", "b")
    await stead.Worker(new_app, store, stead.WorkerOptions(poll_interval=0.01)).run_until_idle()
    fork = await client.fork(parent.run_id, at=1)
    await stead.Worker(new_app, store, stead.WorkerOptions(poll_interval=0.01)).run_until_idle()
    await store.record_action(ActionRow(
        action_id="a1", run_id=parent.run_id, action="retry", target="", author="ops",
        why="test", outcome=ActionOutcome.REFUSED, detail="", at=clock.now()))
    clock.advance(40 * DAY)
    report = await stead.prune(store, 30 * DAY)
    assert report.deleted == 3
    for run_id in (migrated.run_id, parent.run_id, fork.run_id):
        with pytest.raises(stead.UnknownRun):
            await store.get_run(run_id)
    assert await store.list_actions(parent.run_id) == []
