"""The needs-a-human page in headless Chromium, at a person's speed: type a
reason while the page updates itself, and send it; find a 48 h approval and
approve it; a destructive action asks to confirm; a viewer is refused.
Shares the driver of tests/test_web_browser.py (and skips where it does)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import stead
from stead.roles import Role
from stead.web import Identity, create_app
from tests import web_app
from tests.test_web_browser import CHROMIUM, Dashboard, playwright_api
from tests.web_app import UI_TOKEN, serving, settle

# Browser tests: `pytest --full` (CI) runs them.
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")]

POLL = 0.3
TYPING = 60  # ms between keys: a person types, the page polls meanwhile


class Queue(Dashboard):
    async def polls(self) -> int:
        return int(await self.page.locator("#attention").get_attribute("data-polls") or 0)

    async def polled(self, times: int) -> None:
        """Wait until the page has polled `times` more times."""
        # Read from here: a predicate of our own would be evaluated as a
        # string, which the page's CSP (no 'unsafe-eval') refuses.
        wanted = await self.polls() + times
        deadline = time.monotonic() + 30 + times * POLL * 10
        while await self.polls() < wanted:
            assert time.monotonic() < deadline, f"the page polled {await self.polls()} times"
            await asyncio.sleep(POLL / 3)

    def row(self, run_id: str) -> Any:
        return self.page.locator(f"li.item[data-run='{run_id}']")


@pytest.fixture
async def roles() -> dict[str, frozenset[Role]]:
    return {"roles": frozenset(Role)}


@pytest.fixture
async def queue(sqlite_url: str, roles: dict[str, frozenset[Role]]
                ) -> AsyncIterator[Queue]:
    store = await stead.open_store(sqlite_url)

    def named(request: Any) -> Identity | None:
        who = request.headers.get("x-test-operator")
        return Identity(who, roles["roles"]) if who else None

    asgi = create_app(web_app.app, db_url=sqlite_url, token=UI_TOKEN, auth=named,
                      poll_seconds=POLL)
    try:
        with serving(asgi) as url:
            async with playwright_api.async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM,
                                                   args=["--no-sandbox"])
                page = await browser.new_page(viewport={"width": 1280, "height": 1000})
                yield Queue(url, store, page)
                await browser.close()
    finally:
        await store.close()


async def test_a_reason_typed_over_several_polls_is_sent_as_typed(queue: Queue) -> None:
    info = await queue.client.start("approval", "11")
    await settle(queue.store)
    await queue.log_in("carol")
    row = queue.row(info.run_id)
    why = row.locator("form.action[data-action=approve] [name=why]")
    await why.click()
    await why.press_sequentially("the customer confirmed by phone", delay=TYPING)
    # meanwhile the queue changes: another approval arrives, and is shown
    other = await queue.client.start("long_review", "12")
    await settle(queue.store)
    await queue.polled(3)
    await queue.row(other.run_id).wait_for()
    assert await why.input_value() == "the customer confirmed by phone"
    await playwright_api.expect(why).to_be_focused()
    await queue.page.screenshot(path="/tmp/queue-typing.png", full_page=True)
    await row.locator("form.action[data-action=approve] button").click()
    await queue.page.locator("h1.ok").wait_for()
    [event] = await queue.client.events(info.run_id)
    assert event.delivered_why == "the customer confirmed by phone"


async def test_find_a_48_hour_approval_and_approve_it(queue: Queue) -> None:
    await queue.client.start("refund", "1")
    later = await queue.client.start("long_review", "48", task_id="order-48")
    await settle(queue.store)
    await queue.log_in("dora")
    await queue.page.click("details.filtering > summary")
    await queue.page.select_option("form.filters select[name=kind]", "approval")
    await queue.page.click("form.filters button")
    await queue.page.wait_for_url("**/attention?kind=approval*")
    row = queue.row(later.run_id)
    assert re.search(r"4[78]\.\d h left", await row.inner_text())  # due in two days
    assert await queue.page.locator("li.item").count() == 1
    form = row.locator("form.action[data-action=approve]")
    await form.locator("input[name=why]").press_sequentially("stock is back", delay=TYPING)
    await queue.polled(2)
    await form.locator("button").click()
    await queue.page.locator("h1.ok").wait_for()
    await queue.page.click("a.back")
    await queue.page.wait_for_url("**/attention?kind=approval")
    await queue.page.locator("li.empty").wait_for()
    assert [e.delivered_by for e in await queue.client.events(later.run_id)] == ["dora"]


async def test_a_destructive_action_asks_to_confirm(queue: Queue) -> None:
    info = await queue.client.start("approval", "13")
    await settle(queue.store)
    await queue.log_in("erin")
    await queue.row(info.run_id).locator("details.detail > summary").click()
    form = queue.row(info.run_id).locator("form.action[data-action=revoke_wait]")
    await form.locator("[name=why]").press_sequentially("sent twice", delay=TYPING)
    await form.locator("button").click()
    # the browser holds the form back until the box is ticked: nothing was sent
    box = form.locator("input[name=confirm]")
    assert await form.locator("input[name=confirm]:invalid").count() == 1
    await queue.polled(2)
    assert await queue.store.list_actions(info.run_id) == []
    await queue.page.screenshot(path="/tmp/queue-confirm.png", full_page=True)
    await box.check()
    await form.locator("button").click()
    await queue.page.locator("h1.ok").wait_for()
    assert [a.action for a in await queue.store.list_actions(info.run_id)] == ["revoke_wait"]


async def test_a_viewer_is_refused_an_action(queue: Queue, roles: dict[str, Any]) -> None:
    info = await queue.client.start("approval", "14")
    await settle(queue.store)
    await queue.page.set_extra_http_headers({"x-test-operator": "vera"})
    roles["roles"] = frozenset({Role.VIEWER})
    await queue.page.goto(f"{queue.url}/attention")
    approve = queue.row(info.run_id).locator("form.action[data-action=approve]")
    assert await approve.count() == 0  # a viewer is offered nothing to press
    # drawn while vera could approve; her role is taken away before she sends it
    roles["roles"] = frozenset({Role.APPROVER})
    await queue.page.reload()
    await approve.locator("[name=why]").press_sequentially("fine by me", delay=TYPING)
    roles["roles"] = frozenset({Role.VIEWER})
    await approve.locator("button").click()
    await queue.page.locator("h1.refused", has_text="Not allowed").wait_for()
    assert "needs the role approver" in await queue.page.locator("p.message").inner_text()
    [audit] = await queue.store.list_actions(info.run_id)
    assert (audit.author, audit.outcome) == ("vera", "refused")
    assert await queue.client.events(info.run_id) == []


async def test_a_row_resolved_elsewhere_while_typed_in_stays_marked_and_is_refused(
    queue: Queue,
) -> None:
    info = await queue.client.start("approval", "15")
    await settle(queue.store)
    await queue.log_in("fred")
    row = queue.row(info.run_id)
    why = row.locator("form.action[data-action=approve] [name=why]")
    await why.press_sequentially("approved on the call", delay=TYPING)
    await queue.client.cancel(info.run_id)  # someone else decided meanwhile
    await queue.page.locator(f"li.item.gone[data-run='{info.run_id}']").wait_for()
    assert "resolved elsewhere" in await row.locator(".notice").inner_text()
    assert await why.input_value() == "approved on the call"
    await queue.page.screenshot(path="/tmp/queue-gone.png", full_page=True)
    await row.locator("form.action[data-action=approve] button").click()
    message = await queue.page.locator("h1.refused + p.message").inner_text()
    assert "moved on" in message and "cancelled" in message, message
    assert await queue.client.events(info.run_id) == []
