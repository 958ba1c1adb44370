"""A tenant's quotas on what it creates: runs started per minute, children
per run, open waits, stored bytes. A runaway (a loop starting children, huge
results) is stopped by its own tenant's quota with `QuotaExceeded`, nothing
written; other tenants are not affected. On both stores."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import stead
from stead.errors import QuotaExceeded


def _app() -> stead.App:
    app = stead.App("quotas")

    @app.workflow()
    async def leaf(run: stead.Run, i: int) -> int:
        return i

    @app.workflow()
    async def runaway(run: stead.Run, most: int) -> int:
        started = 0
        try:
            for i in range(most):  # a loop starting children (bounded by `most` in the test)
                await run.child(leaf, i, task_id=f"{run.id}-leaf-{i}")
                started += 1
        except QuotaExceeded as exc:
            quota = exc.quota
            await run.step("stopped", lambda: {"quota": quota, "started": started})
            raise
        return started

    @app.workflow()
    async def fan_out(run: stead.Run, n: int) -> dict[str, int]:
        done = await asyncio.gather(*(run.child(leaf, i, task_id=f"{run.id}-fan-{i}")
                                      for i in range(n)), return_exceptions=True)
        refused = [d for d in done if isinstance(d, QuotaExceeded)]
        assert all(isinstance(d, int) for d in done if d not in refused), done
        return {"started": len(done) - len(refused), "refused": len(refused)}

    @app.workflow()
    async def waiter(run: stead.Run) -> Any:
        w = await run.wait("approval")
        return (await w).payload

    @app.workflow()
    async def chatty(run: stead.Run) -> int:
        model = stead.ScriptedModel(["ok"] * 100)
        for i in range(100):  # an agent loop whose every turn journals a large result
            await run.step(f"read-{i}", lambda: "x" * 4000)
            await run.llm(f"think-{i}", model, [{"role": "user", "content": str(i)}])
        return 100

    @app.workflow()
    async def hoarder(run: stead.Run, chunks: int) -> int:
        for i in range(chunks):
            await run.step(f"big-{i}", lambda: "x" * 4000)
        return chunks

    return app


async def _idle(app: stead.App, store: stead.Store) -> None:
    await stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01)).run_until_idle()


async def test_a_runaway_child_loop_is_stopped_by_its_tenants_quota(store: stead.Store) -> None:
    app = _app()
    client = stead.Client(store, app)
    await client.set_tenant_limits("acme", children_per_run=5, by="ops", why="runaway guard")
    bad = await client.start("runaway", 1000, tenant="acme")
    good = await client.start("runaway", 8, tenant="globex")
    await _idle(app, store)
    row = await client.get(bad.run_id)
    assert row.status == "failed" and row.error["type"] == "QuotaExceeded", row.error
    assert "tenant 'acme' is at its children_per_run quota (5 of 5)" in row.error["message"]
    assert "stead tenants set acme --children-per-run" in row.error["message"]
    assert len(await store.children(bad.run_id)) == 5
    journal = await client.journal(bad.run_id)
    stopped = [r for r in journal if r.name == "stopped" and r.status == "ok"]
    assert [json.loads(r.payload) for r in stopped] == [
        {"quota": "children_per_run", "started": 5}]
    assert await client.result(good.run_id) == 8  # globex has no such quota


async def test_runs_per_minute_refuses_the_start_past_it_and_no_other_tenant(
        fstore: stead.Store, clock: stead.FakeClock) -> None:
    app = _app()
    client = stead.Client(fstore, app)
    await client.set_tenant_limits("acme", runs_per_minute=3, by="ops", why="burst guard")
    for i in range(3):
        await client.start("leaf", i, tenant="acme")
    with pytest.raises(QuotaExceeded) as refused:
        await client.start("leaf", 3, tenant="acme")
    assert (refused.value.tenant, refused.value.quota, refused.value.used) == (
        "acme", "runs_per_minute", 3)
    with pytest.raises(QuotaExceeded):
        await client.start_many([stead.Start("leaf", (i,), tenant="acme") for i in range(2)])
    assert len(await client.list_runs(tenant="acme")) == 3  # nothing of the refused written
    for i in range(5):
        await client.start("leaf", i, tenant="globex")
    clock.advance(61)
    await client.start("leaf", 4, tenant="acme")  # a new minute


async def test_open_waits_are_bounded_per_tenant(store: stead.Store) -> None:
    app = _app()
    client = stead.Client(store, app)
    await client.set_tenant_limits("acme", open_waits=2, by="ops", why="wait guard")
    runs = [await client.start("waiter", tenant="acme") for _ in range(3)]
    other = await client.start("waiter", tenant="globex")
    await _idle(app, store)
    statuses = sorted([(await client.get(r.run_id)).status for r in runs])
    assert statuses == ["failed", "waiting", "waiting"]
    failed = next(r for r in [await client.get(r.run_id) for r in runs] if r.status == "failed")
    assert failed.error["type"] == "QuotaExceeded" and "open_waits" in failed.error["message"]
    assert (await client.get(other.run_id)).status == "waiting"


async def test_stored_bytes_stop_a_hoarding_tenant_from_creating_more(
        store: stead.Store) -> None:
    app = _app()
    client = stead.Client(store, app)
    await client.set_tenant_limits("acme", stored_bytes=20_000, by="ops", why="disk guard")
    hoard = await client.start("hoarder", 8, tenant="acme")
    await asyncio.gather(_idle(app, store))
    assert await client.result(hoard.run_id) == 8  # its own journal is not cut short
    with pytest.raises(QuotaExceeded) as refused:
        await client.start("leaf", 1, tenant="acme")
    assert refused.value.quota == "stored_bytes" and refused.value.used > 32_000
    await client.start("leaf", 1, tenant="globex")
    # Lifting the quota lets the tenant start again.
    await client.set_tenant_limits("acme", stored_bytes=None, by="ops", why="more disk")
    await client.start("leaf", 1, tenant="acme")


async def test_a_burst_of_children_at_once_gets_exactly_its_quota(store: stead.Store) -> None:
    app = _app()
    client = stead.Client(store, app)
    await client.set_tenant_limits("acme", children_per_run=5, by="ops", why="fan-out guard")
    info = await client.start("fan_out", 40, tenant="acme")
    await _idle(app, store)
    assert await client.result(info.run_id) == {"started": 5, "refused": 35}
    assert len(await store.children(info.run_id)) == 5


async def test_concurrent_starts_from_two_stores_never_pass_runs_per_minute(
        db_url: str) -> None:
    stores = [await stead.open_store(db_url) for _ in range(2)]
    try:
        clients = [stead.Client(s, _app()) for s in stores]
        await clients[0].set_tenant_limits("acme", runs_per_minute=10, by="ops", why="burst")

        async def start(i: int) -> bool:
            try:
                await clients[i % 2].start("leaf", i, tenant="acme")
            except QuotaExceeded:
                return False
            return True

        started = await asyncio.gather(*(start(i) for i in range(30)))
        assert sum(started) == 10
        assert len(await clients[0].list_runs(tenant="acme")) == 10
    finally:
        for s in stores:
            await s.close()


async def test_an_agent_loop_hoarding_bytes_stops_at_its_next_model_call(
        store: stead.Store) -> None:
    app = _app()
    client = stead.Client(store, app)
    await client.set_tenant_limits("acme", stored_bytes=20_000, by="ops", why="disk guard")
    info = await client.start("chatty", tenant="acme")
    await _idle(app, store)
    row = await client.get(info.run_id)
    assert row.status == "failed" and row.error["type"] == "QuotaExceeded", row.error
    assert "stored_bytes quota" in row.error["message"]
    journal = await client.journal(info.run_id)
    turns = [r for r in journal if r.kind == "llm" and r.status == "ok"]
    assert 4 <= len(turns) <= 6  # about 20,000 bytes of 4,000-byte results
