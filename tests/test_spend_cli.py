"""`stead tenants`: a platform team sets a tenant's budget, quotas and the
price table from the shell; `stead runs show` of a tenant's run says when the
tenant's budget is spent and its model calls wait; raising it resumes the
runs its spend paused."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner, Result

import stead
from stead.cli import main
from tests.test_spend_tenants import Model, _app


def _cli(db_url: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--db", db_url, *args])


async def test_tenants_commands_set_show_and_resume(db_url: str) -> None:
    store = await stead.open_store(db_url)
    try:
        model = Model(store, "acme")
        app = _app(model, calls=2)
        client = stead.Client(store, app)
        done = await asyncio.to_thread(_cli, db_url, "tenants", "price", "tenant-model",
                                       "--input", "1", "--output", "4")
        assert done.exit_code == 0, done.output
        assert "1 per million input tokens, 4 per million output tokens" in done.output
        done = await asyncio.to_thread(_cli, db_url, "tenants", "set", "acme", "--tokens", "80",
                                       "--children-per-run", "3", "--by", "ops", "--why", "trial")
        assert done.exit_code == 0, done.output
        assert "tenant acme: tokens=80, children_per_run=3" in done.output
        first = await client.start("talk", tenant="acme")
        waiting = await client.start("talk", tenant="acme")
        await stead.Worker(app, store).run_until_idle()
        statuses = {(await client.get(r.run_id)).status for r in (first, waiting)}
        assert statuses == {"paused"}

        shown = await asyncio.to_thread(_cli, db_url, "runs", "show", waiting.run_id)
        assert shown.exit_code == 0, shown.output
        # Each call reserves 50 and settles at 40 (20 in at 1, 20 out at 4 per million):
        # one fits, the next would pass 80.
        assert "tenant acme: 40 tokens and cost 0.0001 spent, 0 tokens reserved; budget " \
               "80 tokens" in shown.output
        assert "2 run(s) of the tenant are paused on its budget" in shown.output
        as_json = json.loads((await asyncio.to_thread(
            _cli, db_url, "runs", "show", first.run_id, "--json")).output)
        assert as_json["spend"]["tenant"]["tenant"] == "acme"

        listed = await asyncio.to_thread(_cli, db_url, "tenants", "show", "acme", "--json")
        seen = json.loads(listed.output)
        assert seen["limits"] == {"tokens": 80, "children_per_run": 3}
        assert set(seen["paused"]) == {first.run_id, waiting.run_id}
        assert "acme" in (await asyncio.to_thread(_cli, db_url, "tenants", "ls")).output
        prices = json.loads((await asyncio.to_thread(
            _cli, db_url, "tenants", "prices", "--json")).output)
        assert prices == {"tenant-model": {"input": 1.0, "output": 4.0}}

        raised = await asyncio.to_thread(_cli, db_url, "tenants", "set", "acme", "--tokens",
                                         "none", "--by", "ops", "--why", "paid")
        assert raised.exit_code == 0, raised.output
        await stead.Worker(app, store).run_until_idle()
        assert [(await client.get(r.run_id)).status for r in (first, waiting)] == [
            "completed", "completed"]

        bad = await asyncio.to_thread(_cli, db_url, "tenants", "set", "acme", "--tokens", "-3",
                                      "--by", "ops", "--why", "typo")
        assert bad.exit_code != 0 and "not a limit" in bad.output
    finally:
        await store.close()


async def test_the_run_page_shows_the_spend_and_why_the_tenants_runs_wait(
        store: stead.Store) -> None:
    import re

    import httpx

    from stead.web import create_app
    from tests.web_app import UI_TOKEN

    model = Model(store, "acme")
    app = _app(model, calls=2)
    client = stead.Client(store, app)
    await client.set_tenant_limits("acme", tokens=80, by="ops", why="trial")
    runs = [await client.start("talk", tenant="acme") for _ in range(2)]
    await stead.Worker(app, store).run_until_idle()
    asgi = create_app(app, store=store, token=UI_TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://localhost") as http:
        login = await http.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
        assert csrf is not None
        await http.post("/login", data={"csrf": csrf.group(1), "who": "alice",
                                        "token": UI_TOKEN})
        page = await http.get(f"/runs/{runs[1].run_id}?tab=context")
    assert page.status_code == 200, page.text
    assert "<h2>Spend</h2>" in page.text
    assert "2 run(s) of the tenant are paused on its budget" in page.text
    assert "the tokens budget of tenant &#39;acme&#39; would be passed" in page.text
