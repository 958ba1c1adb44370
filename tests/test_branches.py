"""Tasks the runtime or a store starts while a workflow awaits it are not the
workflow's branches: were they numbered, a gather after them would get other
addresses live than on replay (where those tasks are not started), and the
resumed run would stop as incompatible."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import stead
from stead.records import Fence, Record, ResumeRecord
from stead.store.sqlite import SQLiteStore


def _gather_addresses(journal: list[stead.Record]) -> dict[str, str]:
    return {r.name: r.addr for r in journal if r.name in ("a", "b")}


async def test_an_effect_with_a_timeout_then_a_gather_replays(fstore: stead.Store) -> None:
    """`timeout=` runs the effect in a task of its own (asyncio.wait_for); live only."""
    app = stead.App("t")

    async def pay(op: stead.Operation) -> str:
        return f"paid {op.key}"

    @app.workflow()
    async def wf(run: stead.Run) -> list[Any]:
        paid = await run.effect("pay", pay, timeout=5)
        got = await asyncio.gather(run.step("a", lambda: 1), run.step("b", lambda: 2))
        event = await (await run.wait("go", token=False))
        return [paid[:4], *got, event]

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    assert _gather_addresses(await fstore.load_journal(info.run_id)) == {"a": "b0.0", "b": "b1.0"}

    await client.deliver(info.run_id, kind="go", event_id="1", payload=3)
    await stead.Worker(app, fstore).run_until_idle()  # replays the effect and the gather
    assert await client.result(info.run_id) == ["paid", 1, 2, 3]


class _StoreStartingTasks(SQLiteStore):
    """A store whose appends start a task of their own, as a connection pool
    does when it has to wait for a free connection."""

    async def append(self, fence: Fence, records: list[Record],  # type: ignore[override]
                     resume: ResumeRecord | None = None) -> None:
        await asyncio.gather(asyncio.sleep(0))
        await super().append(fence, records, resume)


@pytest.mark.sqlite_only  # the guarantee is the Store base class's: one backend shows it
async def test_tasks_a_store_starts_are_never_branches(db_url: str) -> None:
    store = _StoreStartingTasks(db_url, clock=stead.SystemClock())
    await store.open()
    try:
        app = stead.App("t")

        @app.workflow()
        async def wf(run: stead.Run) -> list[int]:
            await run.step("first", lambda: 0)
            return list(await asyncio.gather(run.step("a", lambda: 1), run.step("b", lambda: 2)))

        info = await stead.Client(store, app).start(wf)
        await stead.Worker(app, store).run_until_idle()
        assert _gather_addresses(await store.load_journal(info.run_id)) == {
            "a": "b0.0", "b": "b1.0"}
    finally:
        await store.close()
