"""What a backend cannot store, and numbers that mean nothing, are refused at
the door with a typed error, the same on SQLite and PostgreSQL, and nothing
is stored; a write the database refuses for good fails the run instead of
being retried forever."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

import stead
from stead import errors
from stead.testing import DelegatingStore

NUL = "a\x00b"
SURROGATE = "a\ud800b"


def _naming_app(name: str, calls: list[str]) -> stead.App:
    app = stead.App("bounds")

    def work() -> str:
        calls.append(name)
        return "done"

    @app.workflow()
    async def named(run: stead.Run) -> Any:
        return await run.step(name, work)

    return app


@pytest.mark.parametrize("name", [NUL, SURROGATE], ids=["nul", "surrogate"])
async def test_a_step_name_no_store_keeps_fails_the_run_once_with_a_typed_error(
    store: stead.Store, name: str,
) -> None:
    calls: list[str] = []
    app = _naming_app(name, calls)
    run_id = (await stead.Client(store, app).start("named")).run_id
    worker = stead.Worker(app, store, stead.WorkerOptions(store_backoff=0.01))
    done = await asyncio.wait_for(worker.run_until_done([run_id], timeout=60), 120)
    assert done, "the run was retried instead of failing"
    info = await store.get_run(run_id)
    assert info.status == stead.records.RunStatus.FAILED
    error = json.loads(info.error or "{}")
    assert error["type"] == "InvalidValue"
    assert "step name" in error["message"]
    assert calls == []  # refused before the step ran


class _Duplicating(DelegatingStore):
    """Sends each journal write with its last record twice: the database
    refuses it (the same seq), however often it is tried."""

    async def append(self, fence: stead.records.Fence, records: Sequence[stead.Record],
                     resume: stead.ResumeRecord | None = None) -> None:
        doubled = [*records, records[-1]] if records else records
        await self.inner.append(fence, doubled, resume)


async def test_a_write_the_database_refuses_for_good_fails_the_run_instead_of_looping(
    store: stead.Store,
) -> None:
    calls: list[str] = []
    app = _naming_app("fine", calls)
    run_id = (await stead.Client(store, app).start("named")).run_id
    worker = stead.Worker(app, _Duplicating(store), stead.WorkerOptions(store_backoff=0.01))
    done = await asyncio.wait_for(worker.run_until_done([run_id], timeout=60), 120)
    assert done, "a write refused for good was retried as transient"
    info = await store.get_run(run_id)
    assert info.status == stead.records.RunStatus.FAILED
    error = json.loads(info.error or "{}")
    assert error["type"] == "StoreRejected"
    assert "refused the write for good" in error["message"]
    assert calls == ["fine"]  # once: never re-run


async def test_postgres_refusing_a_nul_is_store_rejected(store: stead.Store,
                                                         backend: str) -> None:
    """Below the door (the store's own interface), PostgreSQL's refusal of a
    NUL in text is told apart from a lost connection."""
    if backend != "postgres":
        pytest.skip("SQLite keeps a NUL in text: the door refuses it for both")
    app = _naming_app("fine", [])
    run_id = (await stead.Client(store, app).start("named")).run_id
    [row] = await store.claim("w", ["named@1"], 30.0, 1)
    fence = stead.records.Fence(run_id, row.epoch, "w")
    record = stead.Record(seq=1, addr="0", attempt=1, kind=stead.records.RecordKind.STEP,
                          name=NUL, digest="", status=stead.records.RecordStatus.OK,
                          payload="1", epoch=row.epoch, at=0.0)
    with pytest.raises(errors.StoreRejected, match="refused the write for good"):
        await store.append(fence, [record])
    assert await store.load_journal(run_id) == []
