"""Listing a fleet's stranded runs by workflow: the filter comes before the
limit, in the store's SQL, so a filtered page is never short."""

from __future__ import annotations

import asyncio

from click.testing import CliRunner

import stead
from stead.cli import main

app = stead.App("lists")


@app.workflow()
async def alpha(run: stead.Run, n: int) -> int:
    return n


@app.workflow()
async def beta(run: stead.Run, n: int) -> int:
    return n


async def test_stranded_runs_filtered_by_workflow_before_the_limit(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    client = stead.Client(fstore, app)
    for n in range(3):  # the oldest stranded runs are all alpha
        await client.start(alpha, n)
    late = await client.start(beta, 9)
    clock.advance(120.0)
    found = await client.list_runs(stranded=True, workflow="beta", limit=2, grace=60.0)
    assert [i.run_id for i in found] == [late.run_id] and found[0].stranded
    assert len(await client.list_runs(stranded=True, workflow="alpha", limit=2,
                                      grace=60.0)) == 2
    assert await client.list_runs(stranded=True, workflow="gamma", grace=60.0) == []


def test_runs_ls_stranded_by_workflow_with_a_limit_shows_the_run(db_url: str) -> None:
    async def start() -> str:
        store = await stead.open_store(db_url)
        try:
            client = stead.Client(store, app)
            for n in range(3):
                await client.start(alpha, n)
            return (await client.start(beta, 9)).run_id
        finally:
            await store.close()

    late = asyncio.run(start())
    result = CliRunner().invoke(main, ["--db", db_url, "runs", "ls", "--stranded",
                                       "--workflow", "beta", "--limit", "2", "--grace", "0"])
    assert result.exit_code == 0, result.output
    assert late in result.output and "no stranded runs" not in result.output
