"""Task state by reference, on both stores: a new state over the inline limit
is written to the blob store before the transaction that locks the task and
kept as a reference in the state row and its history, read back whole; one
over the hard cap (`WorkerOptions.max_result_bytes`; from outside a run, its
default) is refused with `StateTooLarge` before anything is written, the
state left at the version it was. The task's state owns its blobs: pruning
the run that wrote it keeps them, forgetting the task deletes them, and a
change that lost its race leaves only an orphan `stead blobs gc` removes."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import stead
from stead import errors
from stead.cli import main
from stead.client import revisions
from stead.payloads.blobs import BlobStore
from stead.payloads.references import LargeValues, Reference, is_reference
from stead.store.seam import Writing
from stead.store.transactions import leases as leases_tx

INLINE = 4096


@pytest.fixture
async def bstore(db_url: str, tmp_path: Path) -> AsyncIterator[tuple[stead.Store, Path]]:
    clock = stead.FakeClock()
    where = tmp_path / "blobs"
    s = await stead.open_store(db_url, clock=clock, lease_clock=clock, blobs=str(where),
                               inline_bytes=INLINE)
    yield s, where
    await s.close()


def _blobs(where: Path) -> list[str]:
    return sorted(p.name for p in where.rglob("*") if p.is_file())


def _app(sizes: list[int]) -> stead.App:
    app = stead.App("states")

    @app.workflow()
    async def grow(run: stead.Run) -> list[str]:
        said = []
        for n in sizes:
            try:
                facts = await run.state.update({"notes": "n" * n}, expect_version=None)
                said.append(f"v{facts.version}:{len(facts['notes'])}")
            except errors.StateTooLarge as exc:
                said.append(str(exc))
        facts = await run.state.get()
        said.append(f"read v{facts.version}:{len(facts['notes'])}")
        return said

    return app


async def _grown(store: stead.Store, sizes: list[int], task_id: str = "t-1",
                 cap: int = 10_000_000) -> tuple[stead.Client, str]:
    app = _app(sizes)
    client = stead.Client(store, app)
    run_id = (await client.start("grow", task_id=task_id)).run_id
    await stead.Worker(app, store, stead.WorkerOptions(max_result_bytes=cap)).run_until_idle()
    return client, run_id


async def test_a_state_over_the_inline_limit_is_kept_by_reference_and_over_the_cap_refused(
        bstore: tuple[stead.Store, Path]) -> None:
    store, where = bstore
    client, run_id = await _grown(store, [10, 6000, 20_000], cap=10_000)
    first, second, refused, read = await client.result(run_id)
    assert (first, second, read) == ("v1:10", "v2:6000", "read v2:6000")
    assert "task t-1: its new state is 20012 bytes as JSON, over the limit of 10000" in refused
    assert "the state was not changed" in refused
    # The state in force reads back whole; its row and history keep a reference.
    facts = await client.task_state("t-1")
    assert (facts.version, facts.data) == (2, {"notes": "n" * 6000})
    history = await store.state_history("t-1")
    assert [v.version for v in history] == [2, 1]
    ref = Reference.of(history[0].data)
    assert ref is not None and ref.size == 6012 and not is_reference(history[1].data)
    assert ref.sha256 in _blobs(where)
    older = await store.state_version("t-1", 2)
    assert older is not None and older.data == '{"notes":"' + "n" * 6000 + '"}'
    # Nothing is an orphan: the state's blob and the journal's records' are owned.
    assert (await store.collect_blobs(grace=0, dry_run=True)).orphans == []


async def test_a_large_state_set_from_outside_is_kept_by_reference(
        bstore: tuple[stead.Store, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    store, where = bstore
    client = stead.Client(store)
    big = {"doc": "d" * 50_000}
    facts = await client.set_state("t-2", big, expect_version=0, why="import")
    assert (facts.version, facts.data) == (1, big)
    [blob] = _blobs(where)
    [v1] = await store.state_history("t-2")
    assert Reference.of(v1.data) == Reference(blob, 50_010)
    # A small change of a large state reads it back first; the new state is large too.
    facts = await client.set_state("t-2", {"n": 1}, expect_version=1, why="count")
    assert facts.data == {**big, "n": 1}
    assert (await client.task_state("t-2")).data == {**big, "n": 1}
    # Back under the limit: inline again.
    facts = await client.set_state("t-2", {"doc": None}, expect_version=2, why="trim")
    assert (await store.state_history("t-2"))[0].data == '{"n":1}'
    monkeypatch.setattr(revisions, "OUTSIDE_LIMIT", 1000)
    with pytest.raises(errors.StateTooLarge, match="over the limit of 1000") as caught:
        await client.set_state("t-2", {"b": "x" * 2000}, expect_version=3, why="too much")
    assert isinstance(caught.value, errors.ResultTooLarge)
    assert (caught.value.task, caught.value.limit) == ("t-2", 1000)
    assert (await client.task_state("t-2")).version == 3
    assert len(_blobs(where)) == 2  # nothing written for the refused one
    assert (await store.collect_blobs(grace=0, dry_run=True)).orphans == []


class _Racing(BlobStore):
    """A blob store that, at its first write, has `race` change the task's
    state (on the event loop, while the write waits): the state moves between
    the large change's read and its transaction."""

    def __init__(self, url: str, loop: asyncio.AbstractEventLoop,
                 race: asyncio.Future[None] | None = None) -> None:
        super().__init__(url)
        self.loop = loop
        self.race = race
        self.moved: stead.Client | None = None

    def put_text(self, text: str) -> tuple[str, int]:
        done = super().put_text(text)
        if self.moved is not None:
            client, self.moved = self.moved, None
            asyncio.run_coroutine_threadsafe(
                client.set_state("t-3", {"by": "desk"}, expect_version=1, why="moved"),
                self.loop).result()
        return done


async def test_a_change_that_loses_its_race_leaves_only_an_orphan_gc_removes(
        bstore: tuple[stead.Store, Path]) -> None:
    store, where = bstore
    app = stead.App("racing")

    @app.workflow()
    async def rewrite(run: stead.Run) -> str:
        try:
            await run.state.update({"doc": "d" * 20_000}, expect_version=1)
        except errors.StateConflict as exc:
            return f"conflict at v{exc.actual}"
        return "written"

    client = stead.Client(store, app)
    await client.set_state("t-3", {"by": "seed"}, expect_version=0, why="seed")
    racing = _Racing(str(where), asyncio.get_running_loop())
    racing.moved = client
    store.large = LargeValues(racing, INLINE)
    run_id = (await client.start("rewrite", task_id="t-3")).run_id
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(run_id) == "conflict at v2"
    facts = await client.task_state("t-3")
    assert (facts.version, facts.data) == (2, {"by": "desk"})
    # The lost attempt's blobs, its new state's and its journal record's, are
    # named by nothing; the retry, a conflict, wrote none.
    orphans = _blobs(where)
    assert len(orphans) == 2
    assert not any(is_reference(v.data) for v in await store.state_history("t-3"))
    done = await store.collect_blobs(grace=0)
    assert sorted(done.orphans) == orphans and _blobs(where) == []


async def test_pruning_keeps_the_state_s_blobs_and_forgetting_deletes_them(
        bstore: tuple[stead.Store, Path]) -> None:
    store, where = bstore
    client, run_id = await _grown(store, [6000, 7000])
    state_blobs = {str(Reference.of(v.data).sha256)  # type: ignore[union-attr]
                   for v in await store.state_history("t-1")}
    assert len(state_blobs) == 2 and state_blobs < set(_blobs(where))
    clock = store.clock
    assert isinstance(clock, stead.FakeClock)
    clock.advance(10 * 86400)
    assert await store.prune(clock.now(), [run_id]) == [run_id]
    # The run's journal blobs went with it; the task's state keeps its own.
    assert set(_blobs(where)) == state_blobs
    assert (await client.task_state("t-1")).data == {"notes": "n" * 7000}
    old = await store.state_version("t-1", 1)
    assert old is not None and old.data == '{"notes":"' + "n" * 6000 + '"}'
    assert (await store.collect_blobs(grace=0, dry_run=True)).orphans == []
    # A new run of the task, then forgetting it: every blob goes.
    await _grown(store, [8000])
    done = await client.forget("t-1", why="erasure request", by="dpo")
    assert done.task_keys == ("t-1",)
    assert _blobs(where) == []
    facts = await client.task_state("t-1")
    assert facts.data == {} and facts.version == 3


async def test_a_tenants_large_state_counts_against_its_stored_bytes(
        bstore: tuple[stead.Store, Path]) -> None:
    store, _ = bstore
    app = _app([300_000])
    client = stead.Client(store, app)
    await client.set_tenant_limits("acme", stored_bytes=500_000, by="ops", why="disk guard")
    run_id = (await client.start("grow", task_id="t-4", tenant="acme")).run_id
    await stead.Worker(app, store).run_until_idle()
    assert (await client.result(run_id))[-1] == "read v1:300000"
    with pytest.raises(errors.QuotaExceeded) as refused:
        await client.start("grow", task_id="t-5", tenant="acme")
    # The state's blob and the journal's (its update and its read record hold
    # the same text: one blob), each 300 KB.
    assert refused.value.quota == "stored_bytes" and refused.value.used > 600_000


@pytest.mark.parametrize("sealed", [True, False])
async def test_a_sealed_state_s_blob_holds_no_clear_text_and_forgetting_shreds_it(
        db_url: str, tmp_path: Path, data_keys: None, sealed: bool) -> None:
    where = tmp_path / "blobs"
    store = await stead.open_store(db_url, blobs=str(where), inline_bytes=INLINE,
                                   payloads=sealed)
    try:
        client = stead.Client(store)
        notes = {"contact": "alice@example.com " * 1000}
        await client.set_state("cust-1", notes, expect_version=0, why="crm import")
        [blob] = where.rglob("*/*")
        assert (b"alice@example.com" in blob.read_bytes()) is not sealed
        [v1] = await store.state_history("cust-1")
        ref = Reference.of(v1.data)
        assert ref is not None and ref.codec == ("sealed" if sealed else "json")
        assert (await client.task_state("cust-1")).data == notes
        # Reopened (a new process: no key held), it still reads back.
        await store.close()
        store = await stead.open_store(db_url, blobs=str(where), inline_bytes=INLINE,
                                       payloads=sealed)
        client = stead.Client(store)
        assert (await client.task_state("cust-1")).data == notes
        await client.forget("cust-1", why="erasure request", by="dpo")
        assert _blobs(where) == []
        assert (await client.task_state("cust-1")).data == {}
    finally:
        await store.close()


async def test_a_fork_seeds_a_large_state_by_reference_and_exports_carry_the_value(
        bstore: tuple[stead.Store, Path], tmp_path: Path) -> None:
    store, where = bstore
    client, run_id = await _grown(store, [6000])
    fork = await client.fork(run_id)
    key = f"run:{fork.run_id}"
    [seed] = await store.state_history(key)
    assert is_reference(seed.data)
    assert (await client.task_state(key)).data == {"notes": "n" * 6000}
    await stead.Worker(_app([6000]), store).run_until_idle()
    assert (await client.result(fork.run_id))[-1] == "read v1:6000"
    # An export carries the state's value, as it carries the journal's.
    stored = await client.export_run(run_id)
    assert stored.state is not None and stored.state.data == '{"notes":"' + "n" * 6000 + '"}'
    assert not any(is_reference(r.payload) for r in stored.journal)
    other = await stead.open_store(f"sqlite:///{tmp_path / 'other.db'}", blobs="")
    try:
        await stead.Client(other).import_run(stored)
        assert (await stead.Client(other).task_state("t-1")).data == {"notes": "n" * 6000}
    finally:
        await other.close()
    # Forgetting the task forgets its forks' states too, and their blobs.
    done = await client.forget("t-1", why="erasure request", by="dpo")
    assert key in done.task_keys and _blobs(where) == []


@pytest.mark.parametrize("sealed", [True, False])
async def test_a_fork_replays_its_parent_s_large_state_records_after_the_parent_is_pruned(
        db_url: str, tmp_path: Path, data_keys: None, sealed: bool) -> None:
    """The fork's journal copies its parent's records, references included:
    the fork owns their blobs (sealed again under its own key when payloads
    are sealed), so it replays them after its parent is pruned."""
    where = tmp_path / "blobs"
    clock = stead.FakeClock()
    store = await stead.open_store(db_url, clock=clock, lease_clock=clock, blobs=str(where),
                                   inline_bytes=INLINE, payloads=sealed)
    try:
        client, run_id = await _grown(store, [6000], task_id="t-6")
        fork = await client.fork(run_id, at=1)  # its update record, not its read
        clock.advance(10 * 86400)
        assert await store.prune(clock.now(), [run_id]) == [run_id]
        await stead.Worker(_app([6000]), store).run_until_idle()
        assert await client.result(fork.run_id) == ["v1:6000", "read v1:6000"]
        assert (await store.collect_blobs(grace=0, dry_run=True)).orphans == []
    finally:
        await store.close()


async def test_the_command_line_shows_a_large_state_and_its_history_s_sizes(
        bstore: tuple[stead.Store, Path], db_url: str) -> None:
    store, where = bstore
    big = {"doc": "d" * 9000}
    await stead.Client(store).set_state("t-7", big, expect_version=0, why="import")
    env = {"STEAD_BLOBS": str(where), "STEAD_INLINE_BYTES": str(INLINE)}
    out = await asyncio.to_thread(
        CliRunner().invoke, main, ["--db", db_url, "state", "show", "t-7", "--json"], env=env)
    assert out.exit_code == 0, out.output
    shown = json.loads(out.output)
    assert shown["data"] == big and shown["version"] == 1
    [version] = shown["history"]
    assert version["data"]["size"] == 9010 and version["data"]["$blob"] in _blobs(where)
    out = await asyncio.to_thread(
        CliRunner().invoke, main, ["--db", db_url, "state", "show", "t-7"], env=env)
    assert out.exit_code == 0 and '"doc": "ddd' in out.output


async def test_a_store_without_its_blob_store_refuses_a_state_kept_by_reference(
        bstore: tuple[stead.Store, Path], db_url: str) -> None:
    store, _ = bstore
    await stead.Client(store).set_state("t-8", {"doc": "d" * 9000}, expect_version=0,
                                        why="import")
    blind = await stead.open_store(db_url, blobs="")
    try:
        client = stead.Client(blind)
        with pytest.raises(errors.StoreError, match="opened without one"):
            await client.task_state("t-8")
        with pytest.raises(errors.StoreError, match="opened without one"):
            await client.set_state("t-8", {"n": 1}, expect_version=1, why="count")
    finally:
        await blind.close()
    assert (await stead.Client(store).task_state("t-8")).version == 1


async def test_a_large_state_stays_inline_while_a_worker_of_an_older_release_is_live(
        bstore: tuple[stead.Store, Path]) -> None:
    """A 0.3.0 process reads a state kept by reference as the reference: while
    one heartbeats on the database a large state is kept inline, as 0.3.0
    kept it; once it has stopped, the next large state goes by reference."""
    store, where = bstore
    now = store.clock.now() if store.clock is not None else time.time()
    release_0_3 = ("0.3.0", 38)
    await store.database.write(lambda: leases_tx.heartbeat(
        "old-host:1:abc", [("grow@1", "worker")], now, now - 3600, None, now + 600,
        release_0_3), Writing())
    client = stead.Client(store)
    big = {"doc": "d" * 50_000}
    facts = await client.set_state("t-7", big, expect_version=0, why="import")
    assert facts.data == big
    [v1] = await store.state_history("t-7")
    assert not is_reference(v1.data) and json.loads(v1.data) == big
    assert _blobs(where) == []
    # Through a run too (its journal's record may still go by reference).
    await _grown(store, [6000], task_id="t-8")
    assert (await store.state_history("t-8"))[0].data == '{"notes":"' + "n" * 6000 + '"}'
    # The old worker stops: a large state goes to the blob store again.
    await store.host_stopped("old-host:1:abc")
    await client.set_state("t-7", {"n": 1}, expect_version=1, why="count")
    latest = (await store.state_history("t-7"))[0]
    ref = Reference.of(latest.data)
    assert ref is not None and ref.sha256 in _blobs(where)
    assert (await client.task_state("t-7")).data == {**big, "n": 1}
