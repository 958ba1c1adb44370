"""Take the README's screenshots of the dashboard with Playwright and the
system Chromium: `PYTHONPATH=. .venv/bin/python -m tests.web_screenshots docs/`.

It builds a small shop on a fresh database (a completed run, two refunds whose
outcome is unknown, a review about to expire, a run paused on an expired
grant, an approval due in two days), has an operator reconcile one of the
refunds, and captures the runs list, "needs a human" (the other refund's
details open, then an approval a model advised on, its conversation in its
details) and the refund's run page at 1366x768, and the inbox and a run page
on a 390 px wide phone; then, on a second app's runs, a shipment's run page
(its effect's arguments by name), a quote's timeline (its step's arguments
by name) and the trace of a run that was taken over."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from playwright.async_api import async_playwright

import stead
from stead import operator
from stead.roles import Role
from stead.web import Identity, create_app
from tests import trace_app, web_app
from tests.web_app import UI_TOKEN, serving, settle

CHROMIUM = "/usr/bin/chromium"
DESKTOP = {"viewport": {"width": 1366, "height": 768}}
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2,
         "is_mobile": True, "has_touch": True}


async def _log_in(page: Any, base: str) -> None:
    """Log in as alice; lands on "needs a human"."""
    await page.goto(f"{base}/login")
    await page.fill("input[name=who]", "alice")
    await page.fill("input[name=token]", UI_TOKEN)
    await page.click("form.login button")
    await page.wait_for_url(f"{base}/attention")


async def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        url = f"sqlite:///{scratch}/shop.db"
        store = await stead.open_store(url)
        client = stead.Client(store, web_app.app)
        await client.start("echo", "hello", task_id="greeting-1")
        refund = await client.start("refund", "123", task_id="order-123")
        await client.start("refund", "124", task_id="order-124")
        await client.start("expiring", "T-77", task_id="ticket-T-77")
        await client.start("granted", "9", task_id="order-9", intent=web_app.expired_grant())
        await client.start("approval", "456", task_id="order-456")
        await client.start("long_review", "789", task_id="order-789")
        advised = await client.start("advised", "o-7731", 4217, task_id="order-7731")
        await settle(store)
        await operator.act(client, "reconcile", operator.Decision(
            run_id=refund.run_id, target=f"{refund.run_id}:0",
            values={"decision": "happened", "result": '{"refund": "rf_1"}'},
            by="alice", why="seen in the bank's dashboard"))
        await settle(store)
        asgi = create_app(web_app.app, db_url=url, token=UI_TOKEN, poll_seconds=60)
        with serving(asgi) as base:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM,
                                                   args=["--no-sandbox"])
                page = await browser.new_page(**DESKTOP)
                await _log_in(page, base)
                await page.screenshot(path=out / "ui-attention.png")
                # the unknown refund's details: its effect's arguments by name
                await page.click("li.item.outcome_unknown details.detail > summary")
                await page.screenshot(path=out / "ui-attention-detail.png")
                await page.click("li.item.outcome_unknown details.detail > summary")
                # the approval a model advised on: the conversation in its details
                item = page.locator(f"li.item[data-run='{advised.run_id}']")
                await item.locator("details.detail > summary").click()
                await item.evaluate("(el) => el.scrollIntoView({block: 'start'})")
                await page.screenshot(path=out / "ui-attention-context.png")
                await page.goto(f"{base}/runs")
                await page.screenshot(path=out / "ui-runs.png")
                await page.goto(f"{base}/runs/{refund.run_id}")
                await page.screenshot(path=out / "ui-run.png")
                await browser.close()
        # The same shop on a phone, as an approver (named by an auth hook) sees it.
        approver = create_app(web_app.app, db_url=url, poll_seconds=60,
                              auth=lambda request: Identity("paula", frozenset({Role.APPROVER})))
        with serving(approver) as base:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM,
                                                   args=["--no-sandbox"])
                phone = await browser.new_page(**PHONE)
                await phone.goto(f"{base}/attention")
                await phone.screenshot(path=out / "ui-attention-phone.png")
                approval = phone.locator("li.item.approval").last
                await phone.goto(f"{base}{await approval.locator('a.what').get_attribute('href')}")
                await phone.screenshot(path=out / "ui-run-phone.png")
                await browser.close()
        await store.close()
        await _traced(scratch, out)


async def _traced(scratch: str, out: Path) -> None:
    url = f"sqlite:///{scratch}/traced.db"
    clock = stead.FakeClock(time.time())  # moved by hand to let the lease lapse
    store = await stead.open_store(url, clock=clock, lease_clock=clock)
    client = stead.Client(store, trace_app.app)
    shipped = await client.start("ship", "o-31", {"city": "Lyon", "street": "12 rue de la Paix"},
                                 task_id="order-31")
    crashed = await client.start("crashy", "o-32", task_id="order-32")
    quoted = await client.start("quote", "o-33", 3, gift=True, task_id="order-33")
    await stead.Worker(trace_app.app, store).run_until_idle()  # dies in `charge`
    clock.advance(45)
    await stead.Worker(trace_app.app, store).run_until_idle()  # taken over, finished
    await store.close()
    asgi = create_app(trace_app.app, db_url=url, token=UI_TOKEN, poll_seconds=60)
    with serving(asgi) as base:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = await browser.new_page(**DESKTOP)
            await _log_in(page, base)
            await page.goto(f"{base}/runs/{shipped.run_id}")
            await page.screenshot(path=out / "ui-run-effect.png")
            await page.goto(f"{base}/runs/{quoted.run_id}?tab=timeline")
            await page.screenshot(path=out / "ui-run-steps.png")
            await page.goto(f"{base}/runs/{crashed.run_id}/trace")
            await page.screenshot(path=out / "ui-trace.png")
            await browser.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")))
