"""`stead status` on both stores: one screen that says whether the fleet is
healthy, and exits 1 when something needs a person."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner, Result

import stead
from stead.cli import main
from tests.test_metrics import _app


def status(db_url: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--db", db_url, "status", *args])


async def test_an_idle_fleet_is_healthy(store: stead.Store, db_url: str) -> None:
    got = await asyncio.to_thread(status, db_url)
    assert got.exit_code == 0, got.output
    assert "healthy: nothing needs a person" in got.output
    assert "unknown effects: 0" in got.output


async def test_an_unknown_outcome_and_an_unserved_workflow_need_a_person(
        store: stead.Store, db_url: str) -> None:
    ledger: list[str] = []
    app, pay, ask = _app(ledger)
    client = stead.Client(store, app)
    unknown = await client.start(pay, True)
    # The worker dies in the effect; its lease runs out; the next stops the run.
    await stead.Worker(app, store, stead.WorkerOptions(lease_seconds=0.5)).run_until_idle()
    await stead.Worker(app, store, stead.WorkerOptions(lease_seconds=0.5)).run_until_idle()
    assert (await client.get(unknown.run_id)).status == "outcome_unknown"
    await client.start(ask)  # runnable, and no live worker hosts it

    got = await asyncio.to_thread(status, db_url, "--grace", "0", "--json")
    assert got.exit_code == 1, got.output
    found = json.loads(got.output)
    assert found["healthy"] is False
    assert found["unknown_effects"] == 1
    assert found["stopped"] == {"outcome_unknown": 1}
    assert found["unserved"] == ["ask@1"]
    assert found["stranded"] == {"ask@1": 1}
    assert found["queues"][0]["queue"] == "(none)" and found["queues"][0]["runnable"] == 1
    assert found["takeovers"] == 1
    assert any("stead reconcile" in n for n in found["needs"])
    text = await asyncio.to_thread(status, db_url, "--grace", "0")
    assert text.exit_code == 1
    assert "NEEDS A PERSON" in text.output and "unknown effects: 1" in text.output
    assert unknown.run_id not in text.output  # counts, not ids


async def test_the_dashboard_status_page_shows_the_same(store: stead.Store) -> None:
    import httpx

    from stead.web import create_app

    ledger: list[str] = []
    app, _pay, ask = _app(ledger)
    await stead.Client(store, app).start(ask)  # runnable, and no live worker hosts it
    asgi = create_app(app, store=store, public=True, read_only=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://127.0.0.1") as http:
        page = await http.get("/status")
    assert page.status_code == 200
    assert "Needs a person (1)" in page.text
    assert "runnable runs and no live worker for ask@1" in page.text
    assert "No live worker heard from." in page.text
