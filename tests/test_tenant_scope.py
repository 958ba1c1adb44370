"""`Client(tenant=...)` on both stores: a client scoped to a tenant starts
runs of that tenant, and another tenant's runs (their reads, lists, waits,
events, streams, decisions and tokens) are not there for it; asking beyond
its tenant otherwise is `OutsideTenant`. Every store operation has a rule."""

from __future__ import annotations

import inspect

import pytest

import stead
from stead.store import Store
from stead.tenant_scope.rules import RULES
from stead.tenant_scope.scoped import Scoped

app = stead.App("scoped")


@app.workflow(version=1)
async def ask(run: stead.Run, secret: str) -> str:
    await run.stream("answer").append(f"thinking about {secret}")
    answer = await (await run.wait("approval", request={"about": secret}))
    return f"{secret}: {answer}"


async def _world(store: Store) -> tuple[stead.RunInfo, stead.RunInfo]:
    """One waiting run of tenant a, one of tenant b."""
    everyone = stead.Client(store, app)
    a = await everyone.start(ask, "a-secret", tenant="a")
    b = await everyone.start(ask, "b-secret", tenant="b")
    await stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01)).run_until_idle()
    return a, b


async def test_a_scoped_client_starts_runs_of_its_tenant(store: Store) -> None:
    client = stead.Client(store, app, tenant="a")
    info = await client.start(ask, "x")
    assert (await store.get_run(info.run_id)).tenant == "a"
    assert (await client.start(ask, "y", tenant="a")).run_id != info.run_id
    with pytest.raises(stead.OutsideTenant):
        await client.start(ask, "z", tenant="b")
    batch = await client.start_many([stead.Start(ask, ("p",)), stead.Start(ask, ("q",))])
    assert {(await store.get_run(r.run_id)).tenant for r in batch} == {"a"}
    # A batch names the start it refuses, and starts none of it.
    with pytest.raises(stead.InvalidStart, match="start #0: this client is scoped to tenant"):
        await client.start_many([stead.Start(ask, ("r",), tenant="b")])
    with pytest.raises(stead.InvalidTenant):
        stead.Client(store, app, tenant="not a tenant id")


async def test_another_tenants_runs_are_not_there(store: Store) -> None:
    a, b = await _world(store)
    client = stead.Client(store, app, tenant="a")
    assert (await client.get(a.run_id)).run_id == a.run_id
    reads = (client.get, client.journal, client.events, client.resumes, client.lineage,
             client.intents, client.migrations, client.snapshots, client.export_run,
             client.stream_token, client.revoke_stream_tokens, client.cancel, client.fork,
             client.children, client.retry)
    for read in reads:
        with pytest.raises(stead.UnknownRun):
            await read(b.run_id)  # type: ignore[operator]
    with pytest.raises(stead.UnknownRun):
        await client.journal_page(b.run_id)
    with pytest.raises(stead.UnknownRun):
        await client.terminate(b.run_id, why="not mine")
    with pytest.raises(stead.UnknownRun):
        async for _ in client.read_stream(b.run_id, "answer"):
            pass
    # Lists hold a's runs alone.
    assert [r.run_id for r in await client.list_runs()] == [a.run_id]
    assert [r.run_id for r in await client.search_runs(text="")] == [a.run_id]
    assert [r.run_id for r in await client.search_runs(workflow="ask")] == [a.run_id]
    assert sum((await client.count_runs()).values()) == 1
    assert {w.run_id for w in await client.waits()} == {a.run_id}
    with pytest.raises(stead.UnknownRun):
        await client.waits(run_id=b.run_id)
    with pytest.raises(stead.OutsideTenant):
        await client.list_runs(tenant="b")
    # b's wait: not there to read, deliver to, revoke or unlock.
    [b_wait] = await stead.Client(store, app).waits(run_id=b.run_id)
    assert await client.wait(b_wait.wait_id) is None
    with pytest.raises(stead.UnknownRun):
        await client.deliver(b.run_id, event_id="e1", payload="yes", wait_id=b_wait.wait_id)
    for change in (client.revoke_wait, client.unlock_wait):
        with pytest.raises(stead.UnknownRun):
            await change(b_wait.wait_id)
    # Nothing of b changed.
    assert (await store.get_run(b.run_id)).status == "waiting"
    assert (await stead.Client(store, app).waits(run_id=b.run_id))[0].state == "open"
    # Operations that span every tenant are refused.
    with pytest.raises(stead.OutsideTenant):
        await client.backlog()
    # b's client sees b's run, and a's is not there for it.
    other = stead.Client(store, app, tenant="b")
    assert (await other.get(b.run_id)).run_id == b.run_id
    with pytest.raises(stead.UnknownRun):
        await other.get(a.run_id)
    # An unscoped client sees both.
    assert {r.run_id for r in await stead.Client(store, app).list_runs()} == {a.run_id, b.run_id}


async def test_a_scoped_client_decides_its_own_runs(store: Store) -> None:
    a, _ = await _world(store)
    client = stead.Client(store, app, tenant="a")
    [wait] = await client.waits(run_id=a.run_id)
    delivered = await client.deliver(a.run_id, event_id="e1", payload="yes",
                                     wait_id=wait.wait_id, token=None,
                                     operator=stead.Operator("ops", "approved"))
    assert type(delivered).__name__ == "Accepted"
    await stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01)).run_until_idle()
    assert await client.result(a.run_id, timeout=10) == "a-secret: yes"
    forked = await client.fork(a.run_id)
    assert (await store.get_run(forked.run_id)).tenant == "a"
    token = await client.stream_token(a.run_id, stream="answer")
    assert await client.check_stream_token(token.text, a.run_id, "answer") is None


def test_every_rule_names_a_store_operation_and_the_rest_are_refused() -> None:
    operations = {name for name, member in inspect.getmembers(Store)
                  if not name.startswith("_") and inspect.iscoroutinefunction(member)}
    assert set(RULES) <= operations | {"close", "open"}, set(RULES) - operations
    scoped = Scoped(object(), "a")
    for name in sorted(operations - set(RULES)):
        with pytest.raises(stead.OutsideTenant):
            getattr(scoped, name)
