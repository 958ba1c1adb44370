"""Large values in S3 (moto's standalone server on loopback, s3fs as
fsspec's backend), on both stores: written before their references commit,
replayed, sealed, deleted with their run, and orphans collected; a task
state too, deleted by forgetting its task."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import stead
from stead.payloads.blobs import BlobStore
from stead.payloads.references import Reference
from tests.s3 import moto_endpoint, s3_url
from tests.test_large_values import crashed_once

__all__ = ["moto_endpoint", "s3_url"]  # fixtures, used by name
INLINE = 4096


@pytest.fixture
async def s3store(db_url: str, s3_url: str) -> AsyncIterator[tuple[stead.Store, BlobStore]]:
    clock = stead.FakeClock()
    s = await stead.open_store(db_url, clock=clock, lease_clock=clock, blobs=s3_url,
                               inline_bytes=INLINE)
    yield s, BlobStore(s3_url)
    await s.close()


def _names(blobs: BlobStore) -> list[str]:
    return sorted(b.sha256 for b in blobs.listing())


async def test_a_large_value_goes_to_s3_and_replays_from_there(
    s3store: tuple[stead.Store, BlobStore],
) -> None:
    store, blobs = s3store
    client, run_id, fetched = await crashed_once(store, ["r"] * 30_000)
    assert await client.result(run_id) == 30_000
    assert fetched == 1
    clock = store.clock
    assert isinstance(clock, stead.FakeClock)
    fetched = next(r for r in await store.load_journal(run_id) if r.name == "fetch")
    ref = Reference.of(fetched.payload)
    assert ref is not None and _names(blobs) == [ref.sha256]
    assert blobs.get_text(ref.sha256, ref.size) == '["r"' + ',"r"' * 29_999 + "]"
    # Pruned with its run.
    clock.advance(10 * 86400)
    assert await store.prune(clock.now(), [run_id]) == [run_id]
    assert _names(blobs) == []


async def test_gc_collects_an_orphan_in_s3(s3store: tuple[stead.Store, BlobStore]) -> None:
    store, blobs = s3store
    app = stead.App("large")

    @app.workflow()
    async def keep(run: stead.Run) -> int:
        return len(await run.step("fetch", lambda: "k" * 9000))

    client = stead.Client(store, app)
    run_id = (await client.start("keep")).run_id
    await stead.Worker(app, store).run_until_idle()
    [owned] = _names(blobs)
    orphan, size = blobs.put_text('"' + "o" * 9000 + '"')
    assert sorted(_names(blobs)) == sorted([owned, orphan])
    young = await store.collect_blobs(grace=3600, dry_run=True)
    assert young.orphans == [] and young.kept == 2  # both younger than the grace
    dry = await store.collect_blobs(grace=0, dry_run=True)
    assert (dry.orphans, dry.orphan_bytes) == ([orphan], size)
    assert blobs.exists(orphan)
    done = await store.collect_blobs(grace=0)
    assert done.orphans == [orphan] and _names(blobs) == [owned]
    assert await client.result(run_id) == 9000


async def test_a_large_task_state_goes_to_s3_and_forgetting_deletes_it(
    s3store: tuple[stead.Store, BlobStore],
) -> None:
    store, blobs = s3store
    client = stead.Client(store)
    big = {"doc": "s" * 20_000}
    await client.set_state("t-s3", big, expect_version=0, why="import")
    [v1] = await store.state_history("t-s3")
    ref = Reference.of(v1.data)
    assert ref is not None and _names(blobs) == [ref.sha256]
    assert (await client.task_state("t-s3")).data == big
    await client.forget("t-s3", why="erasure request", by="dpo")
    assert _names(blobs) == []
