"""Task state stays inline: a new state over the inline limit is stored in
the row as it is (not in the blob store), and one over the hard cap
(`WorkerOptions.max_result_bytes`; from outside a run, its default) is
refused with `StateTooLarge` before anything is written, the state left at
the version it was. On both stores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import stead
from stead import errors
from stead.client import revisions
from stead.payloads.references import is_reference

INLINE = 4096


@pytest.fixture
async def bstore(db_url: str, tmp_path: Path) -> AsyncIterator[tuple[stead.Store, Path]]:
    where = tmp_path / "blobs"
    s = await stead.open_store(db_url, blobs=str(where), inline_bytes=INLINE)
    yield s, where
    await s.close()


def _app(sizes: list[int]) -> stead.App:
    app = stead.App("states")

    @app.workflow()
    async def grow(run: stead.Run) -> list[str]:
        said = []
        for n in sizes:
            try:
                facts = await run.state.update({"notes": "n" * n}, expect_version=None)
                said.append(f"v{facts.version}")
            except errors.StateTooLarge as exc:
                said.append(str(exc))
        return said

    return app


async def test_a_state_over_the_inline_limit_is_kept_inline_and_over_the_cap_refused(
        bstore: tuple[stead.Store, Path]) -> None:
    store, where = bstore
    app = _app([10, 6000, 20_000])
    client = stead.Client(store, app)
    run_id = (await client.start("grow", task_id="t-1")).run_id
    await stead.Worker(app, store, stead.WorkerOptions(max_result_bytes=10_000)
                       ).run_until_idle()
    first, second, refused = await client.result(run_id)
    assert (first, second) == ("v1", "v2")
    assert "task t-1: its new state is 20012 bytes as JSON, over the limit of 10000" in refused
    assert "never in the blob store" in refused
    row = await store.read_state("t-1")
    # The value over the inline limit is in the row, whole; the refused one left no trace.
    assert row is not None and row.version == 2 and not is_reference(row.data)
    assert row.data == '{"notes":"' + "n" * 6000 + '"}'
    assert [v.version for v in await store.state_history("t-1")] == [2, 1]
    assert not [p for p in where.rglob("*") if p.is_file()]  # nothing in the blob store


async def test_a_state_set_from_outside_over_the_cap_is_refused(
        bstore: tuple[stead.Store, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    store, _ = bstore
    client = stead.Client(store)
    facts = await client.set_state("t-2", {"a": 1}, expect_version=0, why="seed")
    monkeypatch.setattr(revisions, "OUTSIDE_LIMIT", 1000)
    with pytest.raises(errors.StateTooLarge, match="over the limit of 1000") as caught:
        await client.set_state("t-2", {"b": "x" * 2000}, expect_version=facts.version,
                               why="too much")
    assert isinstance(caught.value, errors.ResultTooLarge)
    assert (caught.value.task, caught.value.limit) == ("t-2", 1000)
    row = await store.read_state("t-2")
    assert row is not None and row.version == 1
