"""The dashboard end to end in headless Chromium (Debian's `chromium`, driven
by Playwright): reconcile an unknown refund and watch the run finish, approve
a wait, renew the grant of a paused run, and see a stale page's action
refused with the reason. `.ci/run` installs chromium; where it cannot be
installed these tests skip and say why."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import stead
from stead.web import create_app
from tests import stress, web_app
from tests.web_app import UI_TOKEN, serving, settle

playwright_api = pytest.importorskip("playwright.async_api",
                                     reason="playwright is not installed (pip install -e '.[dev]')")

CHROMIUM = os.environ.get("STEAD_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# Browser tests: `pytest --full` (CI) runs them.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install chromium; "
           ".ci/run does) or set STEAD_CHROMIUM")]


class Dashboard:
    def __init__(self, url: str, store: stead.Store, page: Any) -> None:
        self.url = url
        self.store = store
        self.page = page
        self.client = stead.Client(store, web_app.app)

    async def log_in(self, who: str = "alice") -> None:
        await self.page.goto(f"{self.url}/login")
        await self.page.fill("input[name=who]", who)
        await self.page.fill("input[name=token]", UI_TOKEN)
        await self.page.click("form.login button")
        await self.page.wait_for_url(f"{self.url}/attention")

    def form(self, action: str) -> Any:
        return self.page.locator(f"form.action[data-action={action}]").first

    async def submit(self, action: str, why: str, answer: str = "ok", **fields: str) -> str:
        """Fill the action's form (on the page as it is) and send it; the
        answer page's heading is `answer` (ok, refused); returns its message."""
        form = self.form(action)
        if not await form.is_visible():  # folded among the page's other actions
            await form.locator("xpath=ancestor::details[1]/summary").click()
        for name, value in fields.items():
            if name == "decision":
                await form.locator("select[name=decision]").select_option(value)
            else:
                await form.locator(f"input[name={name}]").fill(value)
        await form.locator("[name=why]").fill(why)
        await form.locator("button").click()
        await self.page.locator(f"h1.{answer}").wait_for()
        return str(await self.page.locator("p.message").inner_text())

    async def finishes(self, run_id: str) -> None:
        """A worker runs the run on; its page (polling) shows it completed."""
        worker = stead.Worker(web_app.app, self.store, stead.WorkerOptions(poll_interval=0.05))
        task = asyncio.create_task(worker.run())
        try:
            await self.page.goto(f"{self.url}/runs/{run_id}")
            await self.status("completed")
        finally:
            worker.stop()
            await task

    async def status(self, wanted: str) -> None:
        """Wait until the run page's live part shows `wanted` (it polls)."""
        await self.page.locator("#status", has_text=wanted).wait_for(timeout=15_000 * stress.slow())


@pytest.fixture
async def dash(sqlite_url: str) -> AsyncIterator[Dashboard]:
    store = await stead.open_store(sqlite_url)
    asgi = create_app(web_app.app, db_url=sqlite_url, token=UI_TOKEN, poll_seconds=0.3)
    try:
        with serving(asgi) as url:
            async with playwright_api.async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM,
                                                   args=["--no-sandbox"])
                page = await browser.new_page()
                page.set_default_timeout(30_000 * stress.slow())
                yield Dashboard(url, store, page)
                await browser.close()
    finally:
        await store.close()


async def test_reconcile_an_unknown_refund_and_see_the_run_finish(dash: Dashboard) -> None:
    info = await dash.client.start("refund", "7", task_id="order-7")
    await settle(dash.store)
    assert (await dash.client.get(info.run_id)).status == "outcome_unknown"
    await dash.log_in()  # lands on "needs a human", where the refund is
    done = await dash.submit("reconcile", "seen in the bank's dashboard",
                             decision="happened", result='{"refund": "rf_1"}')
    assert "happened" in done
    await dash.finishes(info.run_id)
    assert await dash.client.result(info.run_id) == {"refunded": True,
                                                     "receipt": {"refund": "rf_1"}}
    await dash.page.click("nav.tabs a[data-tab=audit]")
    audit = await dash.page.locator("table.audit").inner_text()
    assert "reconcile" in audit and "alice" in audit and "bank's dashboard" in audit


async def test_approve_a_wait(dash: Dashboard) -> None:
    info = await dash.client.start("approval", "123")
    await settle(dash.store)
    await dash.log_in("carol")
    await dash.page.goto(f"{dash.url}/runs/{info.run_id}")
    assert "Accepted: event" in await dash.submit("approve", "the customer confirmed by phone")
    await dash.finishes(info.run_id)
    await dash.page.click("nav.tabs a[data-tab=audit]")
    events = await dash.page.locator("#live").inner_text()
    assert "operator carol" in events and "confirmed by phone" in events


async def test_renew_the_grant_of_a_paused_run(dash: Dashboard) -> None:
    info = await dash.client.start("granted", "9", intent=web_app.expired_grant())
    await settle(dash.store)
    assert (await dash.client.get(info.run_id)).status == "paused"
    await dash.log_in()
    await dash.page.goto(f"{dash.url}/attention")
    assert "paused" in await dash.page.locator("#attention").inner_text()
    await dash.page.goto(f"{dash.url}/runs/{info.run_id}")
    await dash.submit("renew_grant", "approved for another hour", expires_in="3600")
    await dash.finishes(info.run_id)
    assert await dash.client.result(info.run_id) == "refunded 9"


async def test_a_stale_pages_action_is_refused_with_the_reason(dash: Dashboard) -> None:
    info = await dash.client.start("approval", "123")
    await settle(dash.store)
    await dash.log_in()
    await dash.page.goto(f"{dash.url}/runs/{info.run_id}")
    [wait] = await dash.client.waits(run_id=info.run_id)
    await dash.client.cancel(info.run_id)  # someone else decided meanwhile
    await dash.page.locator("#moved").wait_for()  # the live part says so
    # the form drawn before is still there
    message = await dash.submit("approve", "too late", answer="refused")
    assert "moved on" in message and "cancelled" in message, message
    assert await dash.client.events(info.run_id) == []  # nothing was delivered
    [audit] = await dash.store.list_actions(info.run_id)
    assert (audit.action, audit.target, audit.outcome) == ("approve", wait.wait_id, "refused")
