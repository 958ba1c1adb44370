"""Tenants on both stores: a run's tenant given at start, by its queue or its
schedule, inherited by its children, forks and successors, shown and
filtered on; and the ids refused at the door."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import stead
from stead import tenants
from stead.cli import main

app = stead.App("tenants")
ACME_ONLY = app.queue("acme_only", tenant="acme")
SHARED = app.queue("shared")


@app.workflow()
async def child(run: stead.Run, n: int) -> int:
    return n + 1


@app.workflow()
async def parent(run: stead.Run, n: int) -> int:
    return int(await run.child(child, n))


@app.workflow()
async def looping(run: stead.Run, n: int) -> int:
    if n < 2:
        await run.continue_as_new(n + 1)
    return n


@pytest.mark.parametrize("good", ["acme", "org:42", "A", "a" * 64, "team_1.eu-west@x"])
def test_good_ids(good: str) -> None:
    assert tenants.check(good) == good


@pytest.mark.parametrize("bad", ["", " acme", "acme ", "-acme", "a" * 65, "ac/me", "ac\x00me",
                                 "é", 42, b"acme"])
def test_bad_ids_are_refused(bad: object) -> None:
    with pytest.raises(stead.InvalidTenant, match="tenant"):
        tenants.check(bad)


async def test_start_stores_and_shows_the_tenant(store: stead.Store) -> None:
    client = stead.Client(store, app)
    a = await client.start(child, 1, tenant="acme")
    b = await client.start(child, 2)
    assert a.tenant == "acme" and b.tenant is None
    assert (await client.get(a.run_id)).tenant == "acme"
    assert (await client.get(b.run_id)).tenant is None
    assert [r.run_id for r in await client.list_runs(tenant="acme")] == [a.run_id]
    assert [r.run_id for r in await client.search_runs(tenant="acme")] == [a.run_id]
    assert {r.run_id for r in await client.list_runs()} == {a.run_id, b.run_id}
    with pytest.raises(stead.InvalidTenant):
        await client.start(child, 3, tenant="not a tenant")
    with pytest.raises(stead.InvalidTenant):
        await client.list_runs(tenant="x" * 100)


async def test_batch_starts_keep_each_tenant(store: stead.Store) -> None:
    client = stead.Client(store, app)
    made = await client.start_many([stead.Start(child, (i,), tenant=t)
                                    for i, t in enumerate(["a", "b", None, "a"])])
    assert [m.tenant for m in made] == ["a", "b", None, "a"]
    assert [(await client.get(m.run_id)).tenant for m in made] == ["a", "b", None, "a"]
    assert len(await client.list_runs(tenant="a")) == 2


async def test_a_queue_gives_its_tenant_and_refuses_another(store: stead.Store) -> None:
    client = stead.Client(store, app)
    run = await client.start(child, 1, queue="acme_only")
    assert (await client.get(run.run_id)).tenant == "acme"
    with pytest.raises(stead.InvalidTenant, match="acme"):
        await client.start(child, 1, queue="acme_only", tenant="globex")
    shared = await client.start(child, 1, queue="shared", tenant="globex")
    assert (await client.get(shared.run_id)).tenant == "globex"


async def test_children_and_successors_inherit_the_tenant(store: stead.Store) -> None:
    client = stead.Client(store, app)
    top = await client.start(parent, 1, tenant="acme")
    chain = await client.start(looping, 0, tenant="globex")
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(top.run_id) == 2
    kids = await store.children(top.run_id)
    assert len(kids) == 1
    assert (await client.get(kids[0].run_id)).tenant == "acme"
    globex = await client.list_runs(tenant="globex")
    assert len(globex) == 3  # the run and its two successors
    assert chain.run_id in {r.run_id for r in globex}
    fork = await client.fork(top.run_id)
    assert (await client.get(fork.run_id)).tenant == "acme"


async def test_a_schedule_names_its_tenant() -> None:
    sched_app = stead.App("sched")

    @sched_app.schedule("*/5 * * * *", tenant="acme")
    async def tick(run: stead.Run, at: str) -> str:
        return at

    assert sched_app.schedules[0].tenant == "acme"
    assert sched_app.schedules[0].new_run(0.0).tenant == "acme"
    with pytest.raises(stead.InvalidTenant):
        sched_app.schedule("*/5 * * * *", name="bad", tenant="no way")


def test_cli_starts_lists_and_shows_by_tenant(db_url: str) -> None:
    runner = CliRunner()
    env = {"STEAD_DATABASE_URL": db_url}
    spec = "tests.test_tenants:app"
    started = runner.invoke(main, ["start", spec, "child", "[1]", "--tenant", "acme", "-q"],
                            env=env)
    assert started.exit_code == 0, started.output
    run_id = started.output.strip()
    runner.invoke(main, ["start", spec, "child", "[2]", "-q"], env=env)
    listed = runner.invoke(main, ["runs", "ls", "--tenant", "acme"], env=env)
    assert listed.exit_code == 0, listed.output
    assert run_id in listed.output and "tenant" in listed.output
    assert len(listed.output.strip().splitlines()) == 2  # the header and the one run
    shown = runner.invoke(main, ["runs", "show", run_id], env=env)
    assert "tenant    acme" in shown.output
    refused = runner.invoke(main, ["start", spec, "child", "[1]", "--tenant", "a b"], env=env)
    assert refused.exit_code != 0 and "not a tenant id" in refused.output
