"""The runs list, the run page and the trace view in headless Chromium (Debian's
`chromium`, driven by Playwright), at a person's pace: type a search and
filter the runs, open a run and expand an effect's arguments, open the trace
of a run that was taken over. Skips, saying why, where there is no Chromium."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

import stead
from stead.web import create_app
from tests import trace_app
from tests.test_web_browser import CHROMIUM
from tests.web_app import UI_TOKEN, serving

playwright_api = pytest.importorskip("playwright.async_api",
                                     reason="playwright is not installed (pip install -e '.[dev]')")
# Browser tests: `pytest --full` (CI) runs them.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not __import__("pathlib").Path(CHROMIUM).exists(),
    reason=f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install chromium)")]
TYPING = 60  # ms between keys: a person's pace, so a poll lands while they type


class Browser:
    def __init__(self, url: str, page: Any, client: stead.Client, clock: stead.FakeClock) -> None:
        self.url, self.page, self.client, self.clock = url, page, client, clock

    async def log_in(self) -> None:
        await self.page.goto(f"{self.url}/login")
        await self.page.locator("input[name=who]").type("alice", delay=TYPING)
        await self.page.locator("input[name=token]").type(UI_TOKEN, delay=TYPING // 4)
        await self.page.click("form.login button")
        await self.page.wait_for_url(f"{self.url}/attention")

    async def settle(self) -> None:
        await stead.Worker(trace_app.app, self.client.store).run_until_idle()


@pytest.fixture
async def browser(sqlite_url: str) -> AsyncIterator[Browser]:
    clock = stead.FakeClock()
    store = await stead.open_store(sqlite_url, clock=clock, lease_clock=clock)
    asgi = create_app(trace_app.app, db_url=sqlite_url, token=UI_TOKEN, poll_seconds=0.3)
    try:
        with serving(asgi) as url:
            async with playwright_api.async_playwright() as pw:
                chromium = await pw.chromium.launch(executable_path=CHROMIUM,
                                                    args=["--no-sandbox"])
                page = await chromium.new_page()
                yield Browser(url, page, stead.Client(store, trace_app.app), clock)
                await chromium.close()
    finally:
        await store.close()


async def test_filter_the_runs_by_search_and_status(browser: Browser) -> None:
    ships = [await browser.client.start("ship", f"o-{i}", {"city": "Lyon"},
                                        task_id=f"order-{i}") for i in range(3)]
    await browser.client.start("long", 3, task_id="ticks")
    await browser.settle()
    await browser.log_in()
    page = browser.page
    await page.goto(f"{browser.url}/runs")
    await page.locator("input[name=q]").type("order-2", delay=TYPING)
    await page.locator("select[name=status]").select_option("completed")
    await page.click("form.filters button")
    await page.wait_for_url("**/runs?q=order-2&status=completed**")
    rows = page.locator("table.runs tbody tr[data-run]")
    await rows.first.wait_for()
    assert await rows.count() == 1
    assert await rows.first.get_attribute("data-run") == ships[2].run_id
    # The filters stay in the form as typed, and a poll keeps them.
    assert await page.locator("input[name=q]").input_value() == "order-2"
    await page.wait_for_timeout(1000)  # three polls at a person's pace: the list stays filtered
    assert await rows.count() == 1


async def test_expand_an_effects_arguments(browser: Browser) -> None:
    run = await browser.client.start("ship", "o-7", {"city": "Lyon",
                                                     "street": "12 rue de la Paix"})
    await browser.settle()
    await browser.log_in()
    page = browser.page
    await page.goto(f"{browser.url}/runs/{run.run_id}")
    cell = page.locator("tr.effect[data-effect=ship_parcel] td.arguments")
    # by name first; the whole JSON one click away
    assert await cell.locator("table.named th").all_inner_texts() == ["order", "address"]
    whole = cell.locator("details.json pre")
    assert not await whole.is_visible()
    await cell.locator("details.json summary").click()
    await whole.wait_for(state="visible")
    assert '"street": "12 rue de la Paix"' in await whole.inner_text()
    key = page.locator("tr.effect[data-effect=ship_parcel] .id code").first
    assert await key.get_attribute("title") == f"{run.run_id}:1"


async def test_open_the_trace_of_a_run_that_was_taken_over(browser: Browser) -> None:
    run = await browser.client.start("crashy", uuid.uuid4().hex)
    await browser.settle()  # the first worker dies in `charge`
    browser.clock.advance(60)
    await browser.settle()  # a second takes the run over and finishes it
    await browser.log_in()
    page = browser.page
    await page.goto(f"{browser.url}/runs/{run.run_id}")
    await page.click("nav.tabs a[data-tab=trace]")
    await page.wait_for_url(f"**/runs/{run.run_id}/trace**")
    charge = page.locator("table.trace tr.bar[data-name=charge]")
    await charge.wait_for()
    assert "taken-over" in (await charge.get_attribute("class") or "")
    assert "taken over (epochs 1, 2)" in await charge.inner_text()
    assert await page.locator("table.trace line.takeover").count() == 2
    assert "epoch 2 by" in await page.locator("p.legend").inner_text()
    box = await charge.locator("rect").bounding_box()
    assert box is not None and box["width"] > 0
