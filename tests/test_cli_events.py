"""`stead approve`, `stead reject`, `stead events ls`, `stead waits ls`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import stead
from stead.cli import main
from stead.workflow.waits import sign


def _app() -> stead.App:
    app = stead.App("t")

    @app.workflow()
    async def confirm(run: stead.Run, order: str) -> Any:
        w = await run.wait("user_confirmation", bind={"order_id": order})
        answer = await w
        return answer

    return app


async def _waiting(url: str, orders: list[str]) -> list[tuple[str, str, str]]:
    store = await stead.open_store(url)
    try:
        app = _app()
        client = stead.Client(store, app)
        ids = [(await client.start("confirm", o)).run_id for o in orders]
        await stead.Worker(app, store).run_until_idle()
        out = []
        for run_id in ids:
            [w] = await client.waits(run_id=run_id)
            key = (await store.keyring()).current  # as the worker signed it
            out.append((run_id, w.wait_id, sign(key, run_id, w.wait_id)))
        return out
    finally:
        await store.close()


async def _finish(url: str) -> list[Any]:
    store = await stead.open_store(url)
    try:
        app = _app()
        await stead.Worker(app, store).run_until_idle()
        client = stead.Client(store, app)
        return [r.result for r in await client.list_runs(status="completed")]
    finally:
        await store.close()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/stead.db"


def test_approve_reject_and_list(url: str) -> None:
    [(a, wait_a, token_a), (b, wait_b, token_b)] = asyncio.run(_waiting(url, ["123", "456"]))
    runner = CliRunner()

    def stead_(*args: str) -> Any:
        return runner.invoke(main, ["--db", url, *args])

    listed = stead_("waits", "ls")
    assert listed.exit_code == 0 and wait_a in listed.output and wait_b in listed.output
    assert '"order_id":"123"' in listed.output

    bad = stead_("approve", a, "--wait", wait_a, "--token", "stk_wrong")
    assert bad.exit_code == 1 and "bad token" in bad.output
    mismatch = stead_("approve", a, "--wait", wait_a, "--token", token_a,
                      "--bind", '{"order_id": "999"}')
    assert mismatch.exit_code == 1 and "bound value mismatch (order_id)" in mismatch.output
    ok = stead_("approve", a, "--wait", wait_a, "--token", token_a, "--payload", '{"note": "go"}')
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("Accepted: ") and 'order_id="123"' in ok.output
    again = stead_("approve", a, "--wait", wait_a, "--token", token_a, "--payload",
                   '{"note": "go"}')
    assert again.exit_code == 0 and again.output.startswith("Duplicate: ")

    no = stead_("reject", b, "--kind", "user_confirmation", "--token", token_b,
                "--reason", "changed my mind")
    assert no.exit_code == 0, no.output

    events = stead_("events", "ls", a, "--json")
    assert events.exit_code == 0
    verdicts = [(e["verdict"], e["reason"]) for e in json.loads(events.output)]
    assert verdicts == [("rejected", "bad_token"), ("rejected", "bound_value_mismatch"),
                        ("accepted", None)]
    assert "no open waits" in stead_("waits", "ls").output
    assert len(json.loads(stead_("waits", "ls", "--all", "--json").output)) == 2

    results = asyncio.run(_finish(url))
    assert {"approved": True, "note": "go"} in results
    assert {"approved": False, "reason": "changed my mind"} in results


def test_usage_errors(url: str) -> None:
    [(a, wait_a, token_a)] = asyncio.run(_waiting(url, ["1"]))
    runner = CliRunner()
    both = runner.invoke(main, ["--db", url, "approve", a, "--wait", wait_a, "--kind", "x",
                                "--token", token_a])
    assert both.exit_code == 1 and "name the wait" in both.output
    bad_json = runner.invoke(main, ["--db", url, "approve", a, "--wait", wait_a, "--token",
                                    token_a, "--payload", "[1"])
    assert bad_json.exit_code == 1
    unknown = runner.invoke(main, ["--db", url, "events", "ls", "nope"])
    assert unknown.exit_code == 1 and "no run" in unknown.output


def test_db_migrate(url: str, tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["--db", url, "db", "migrate"])
    assert out.exit_code == 0 and "schema 0 -> " in out.output, out.output
    assert (tmp_path / "stead.db").exists()
    again = CliRunner().invoke(main, ["--db", url, "db", "migrate"])
    assert again.exit_code == 0
