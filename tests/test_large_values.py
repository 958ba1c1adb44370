"""Large values by reference, on both stores, over a local directory: a step
result, an effect result and a run's result over the inline limit are kept in
the blob store and journaled as references; a takeover replays them from
there; the hard cap still refuses; pruning deletes the blobs with their run;
`stead blobs gc` deletes only orphans older than its grace."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import stead
from stead import errors
from stead.cli import main
from stead.payloads.blobs import BlobStore
from stead.payloads.references import LargeValues, Reference, is_reference
from stead.workflow.waits import sign
from tests.helpers import Crash, approval_app, crash_then_resume

INLINE = 4096


@pytest.fixture
async def bstore(db_url: str, tmp_path: Path) -> AsyncIterator[tuple[stead.Store, Path]]:
    clock = stead.FakeClock()
    where = tmp_path / "blobs"
    s = await stead.open_store(db_url, clock=clock, lease_clock=clock, blobs=str(where),
                               inline_bytes=INLINE)
    yield s, where
    await s.close()


def _blobs(where: Path) -> list[Path]:
    return sorted(p for p in where.rglob("*") if p.is_file())


def _app() -> stead.App:
    app = stead.App("large")

    @app.workflow()
    async def bulky(run: stead.Run, n: int) -> dict[str, object]:
        big = await run.step("fetch", lambda: "x" * n)
        small = await run.step("count", lambda: len(big))
        sent = await run.effect("export", lambda op: ["row"] * (n // 6), idempotent=True)
        return {"big": big, "small": small, "rows": len(sent)}

    return app


async def _bulky(store: stead.Store, n: int) -> tuple[stead.Client, str]:
    """A `bulky` run of `n`, run to its end."""
    app = _app()
    client = stead.Client(store, app)
    run_id = (await client.start("bulky", n)).run_id
    await stead.Worker(app, store).run_until_idle()
    return client, run_id


async def test_a_large_step_result_is_journaled_as_a_reference_and_read_back(
    bstore: tuple[stead.Store, Path],
) -> None:
    store, where = bstore
    client, run_id = await _bulky(store, 100_000)
    result = await client.result(run_id)
    assert result == {"big": "x" * 100_000, "small": 100_000, "rows": 16_666}
    journal = await client.journal(run_id)
    fetched = next(r for r in journal if r.name == "fetch" and r.status == "ok")
    ref = Reference.of(fetched.payload)
    assert ref is not None and ref.size == 100_002  # the JSON string, quotes included
    counted = next(r for r in journal if r.name == "count")
    assert not is_reference(counted.payload)  # a small value stays inline
    # The step's, the effect's and the run's result: three blobs, each named by its hash.
    assert len(_blobs(where)) == 3
    for path in _blobs(where):
        assert path.name == path.parent.name + path.name[2:]
    row = await store.get_run(run_id)
    assert row.result is not None and is_reference(row.result)


async def test_a_tenants_large_values_count_against_its_stored_bytes(
    bstore: tuple[stead.Store, Path],
) -> None:
    """A value kept in the blob store leaves only its reference in the
    journal; the bytes it holds count against its tenant's quota all the same."""
    store, _ = bstore
    app = _app()
    client = stead.Client(store, app)
    await client.set_tenant_limits("acme", stored_bytes=150_000, by="ops", why="disk guard")
    run_id = (await client.start("bulky", 100_000, tenant="acme")).run_id
    await stead.Worker(app, store).run_until_idle()
    assert (await client.result(run_id))["small"] == 100_000
    with pytest.raises(errors.QuotaExceeded) as refused:
        await client.start("bulky", 10, tenant="acme")
    assert refused.value.quota == "stored_bytes" and refused.value.used > 200_000


async def crashed_once(store: stead.Store, value: object) -> tuple[stead.Client, str, int]:
    """A run whose step returns `value`, then whose worker crashes; run to its
    end by a second worker. Its client, id and how often the step was called."""
    calls: list[str] = []
    app = stead.App("large")

    def crash_once() -> None:
        if "crash" not in calls:
            calls.append("crash")
            raise Crash()

    @app.workflow()
    async def twice(run: stead.Run) -> int:
        big = await run.step("fetch", lambda: calls.append("fetch") or value)
        await run.step("crash", crash_once)
        return len(big)

    client = stead.Client(store, app)
    run_id = (await client.start("twice")).run_id
    clock = store.clock
    assert isinstance(clock, stead.FakeClock)
    await crash_then_resume(app, store, clock)
    return client, run_id, calls.count("fetch")


async def test_a_takeover_replays_large_values_from_the_blob_store(
    bstore: tuple[stead.Store, Path],
) -> None:
    client, run_id, fetched = await crashed_once(bstore[0], "y" * 50_000)
    assert await client.result(run_id) == 50_000
    assert fetched == 1  # replayed from the blob, not called again


async def test_the_hard_cap_still_refuses_with_a_clear_error(
    bstore: tuple[stead.Store, Path],
) -> None:
    store, where = bstore
    app = stead.App("large")

    @app.workflow()
    async def huge(run: stead.Run) -> str:
        try:
            await run.step("fetch_everything", lambda: "z" * 20_000)
        except errors.ResultTooLarge as exc:
            return str(exc)
        return "stored"

    client = stead.Client(store, app)
    run_id = (await client.start("huge")).run_id
    await stead.Worker(app, store, stead.WorkerOptions(max_result_bytes=10_000)).run_until_idle()
    message = await client.result(run_id)
    assert "the result of step 'fetch_everything' is 20 KB" in message
    assert "WorkerOptions.max_result_bytes" in message
    assert _blobs(where) == []  # refused before anything was written


async def test_a_missing_blob_is_a_clear_error_not_garbage(
    bstore: tuple[stead.Store, Path],
) -> None:
    store, where = bstore
    client, run_id = await _bulky(store, 10_000)
    for path in _blobs(where):
        path.unlink()
    with pytest.raises(stead.StoreError, match="missing from the blob store"):
        await client.result(run_id)


async def test_prune_deletes_a_runs_blobs_but_not_those_another_run_owns(
    bstore: tuple[stead.Store, Path],
) -> None:
    store, where = bstore
    client, first = await _bulky(store, 30_000)
    clock = store.clock
    assert isinstance(clock, stead.FakeClock)
    clock.advance(10 * 86400)
    second = (await client.start("bulky", 30_000)).run_id  # the same values: shared blobs
    third = (await client.start("bulky", 40_000)).run_id
    await stead.Worker(_app(), store).run_until_idle()
    assert len(_blobs(where)) == 6  # first and second share their three
    cutoff = clock.now() - 86400
    ids = await store.prunable(cutoff, 100)
    assert ids == [first]
    assert await store.prune(cutoff, ids) == [first]
    assert len(_blobs(where)) == 6  # the second run still owns the shared ones
    clock.advance(10 * 86400)
    assert sorted(await store.prune(clock.now(), [second, third])) == sorted([second, third])
    assert _blobs(where) == []


async def test_gc_deletes_old_orphans_only(
    bstore: tuple[stead.Store, Path], db_url: str,
) -> None:
    store, where = bstore
    client, run_id = await _bulky(store, 10_000)
    owned = _blobs(where)
    large = LargeValues(BlobStore(str(where)), INLINE)
    old = large.put(json.dumps("o" * 9000))  # a write whose reference never committed
    young = large.put(json.dumps("n" * 9000))  # one in flight
    long_ago = time.time() - 7200
    for sha in (old.sha256, *(p.name for p in owned)):
        os.utime(large.blobs.path(sha), (long_ago, long_ago))
    dry = await store.collect_blobs(grace=3600, dry_run=True)
    assert dry.orphans == [old.sha256] and dry.orphan_bytes == old.size
    assert large.blobs.exists(old.sha256)
    done = await store.collect_blobs(grace=3600)
    assert done.orphans == [old.sha256] and not large.blobs.exists(old.sha256)
    assert large.blobs.exists(young.sha256)
    assert all(p.exists() for p in owned)
    assert await client.result(run_id) == {"big": "x" * 10_000, "small": 10_000, "rows": 1666}
    # The command line, on the same store.
    env = {"STEAD_BLOBS": str(where)}
    out = await asyncio.to_thread(
        CliRunner().invoke, main, ["--db", db_url, "blobs", "gc", "--grace", "0", "--dry-run"],
        env=env)
    assert out.exit_code == 0, out.output
    assert young.sha256 in out.output and "would delete 1 orphan" in out.output
    assert large.blobs.exists(young.sha256)


async def test_a_large_stream_entry_is_kept_by_reference_and_read_back(
    bstore: tuple[stead.Store, Path],
) -> None:
    store, where = bstore
    app = stead.App("large")

    @app.workflow()
    async def streaming(run: stead.Run) -> int:
        answer = run.stream("answer")
        await answer.append("s" * 20_000)
        await answer.append("small")
        return 2

    client = stead.Client(store, app)
    run_id = (await client.start("streaming")).run_id
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(run_id) == 2
    stored = await store.read_stream(run_id, "answer")
    assert is_reference(stored[0].text) and not is_reference(stored[1].text)
    assert len(_blobs(where)) == 1
    read = [e.value async for e in client.read_stream(run_id, "answer")]
    assert read == ["s" * 20_000, "small"]
    clock = store.clock
    assert isinstance(clock, stead.FakeClock)
    clock.advance(10 * 86400)
    assert await store.prune(clock.now(), [run_id]) == [run_id]
    assert _blobs(where) == []


async def test_a_large_event_payload_is_kept_by_reference_and_received_whole(
    bstore: tuple[stead.Store, Path],
) -> None:
    store, where = bstore
    app = approval_app()
    client = stead.Client(store, app, max_event_bytes=1024 * 1024)
    run_id = (await client.start("confirm", "o-1")).run_id
    await stead.Worker(app, store).run_until_idle()
    [w] = await client.waits(run_id=run_id)
    token = sign((await store.keyring()).current, run_id, w.wait_id)
    document = {"contract": "c" * 50_000}
    verdict = await client.deliver(run_id, wait_id=w.wait_id, event_id="evt-1",
                                   payload=document, bind={"order_id": "o-1"}, token=token)
    assert isinstance(verdict, stead.Accepted), verdict
    [event] = await store.list_events(run_id)
    assert is_reference(event.payload)
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(run_id) == document
    # The event's blob, and the wait record's (the payload it received, journaled).
    assert len(_blobs(where)) == 2
    clock = store.clock
    assert isinstance(clock, stead.FakeClock)
    clock.advance(10 * 86400)
    assert await store.prune(clock.now(), [run_id]) == [run_id]
    assert _blobs(where) == []


@pytest.mark.parametrize("sealed", [True, False])
async def test_sealed_blobs_hold_no_clear_text_and_forgetting_deletes_them(
    db_url: str, tmp_path: Path, data_keys: None, sealed: bool,
) -> None:
    where = tmp_path / "blobs"
    store = await stead.open_store(db_url, blobs=str(where), inline_bytes=INLINE,
                                   payloads=sealed)
    try:
        app = stead.App("large")

        @app.workflow()
        async def personal(run: stead.Run) -> int:
            text = await run.step("fetch", lambda: "alice@example.com " * 1000)
            return len(text)

        client = stead.Client(store, app)
        run_id = (await client.start("personal", task_id="cust-1")).run_id
        await stead.Worker(app, store).run_until_idle()
        assert await client.result(run_id) == 18_000
        [blob] = _blobs(where)
        assert (b"alice@example.com" in blob.read_bytes()) is not sealed
        ref = Reference.of((await store.load_journal(run_id))[0].payload)
        assert ref is not None and ref.codec == ("sealed" if sealed else "json")
        await client.forget("cust-1", why="erasure request", by="dpo")
        assert _blobs(where) == []
    finally:
        await store.close()


async def test_exports_carry_the_values_not_their_references(
    bstore: tuple[stead.Store, Path], tmp_path: Path,
) -> None:
    store, where = bstore
    client, run_id = await _bulky(store, 10_000)
    stored = await client.export_run(run_id)
    assert not any(is_reference(r.payload) for r in stored.journal)
    assert stored.run.result is not None and not is_reference(stored.run.result)
    # Imported into a database with no blob store, it reads as it did.
    other = await stead.open_store(f"sqlite:///{tmp_path / 'other.db'}", blobs="")
    try:
        await stead.Client(other).import_run(stored)
        assert (await stead.Client(other).get(run_id)).result == {
            "big": "x" * 10_000, "small": 10_000, "rows": 1666}
    finally:
        await other.close()
    # Pruning with an export keeps the values in the export, the blobs go.
    lines: list[str] = []
    clock = store.clock
    assert isinstance(clock, stead.FakeClock)
    clock.advance(10 * 86400)
    report = await stead.retention.prune(
        store, 86400, export=lambda runs: lines.extend(json.dumps(r.to_json()) for r in runs))
    assert report.deleted == 1 and _blobs(where) == []
    [line] = lines
    assert '"$blob"' not in line and "x" * 10_000 in line


def test_a_changed_blob_is_refused_not_read(tmp_path: Path) -> None:
    large = LargeValues(BlobStore(str(tmp_path / "blobs")), INLINE)
    ref = large.put(json.dumps("v" * 9000))
    assert json.loads(large.get(ref)) == "v" * 9000
    path = Path(large.blobs.path(ref.sha256))
    path.write_bytes(path.read_bytes().replace(b"v", b"w", 1))
    with pytest.raises(stead.StoreError, match="does not hash to its name"):
        large.get(ref)
    path.write_bytes(path.read_bytes() + b" ")
    with pytest.raises(stead.StoreError, match=f"is not {ref.size} bytes"):
        large.get(ref)
    # A temporary file of a write in progress is not a blob.
    (path.parent / f"{ref.sha256}.1234abcd.partial").write_bytes(b"half")
    assert [b.sha256 for b in large.blobs.listing()] == [ref.sha256]
