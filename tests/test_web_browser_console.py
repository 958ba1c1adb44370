"""The operator's console in headless Chromium, as its people use it, at a
person's speed: a viewer sees no forms; an approver answers an approval from
the inbox with the keyboard alone, and from a phone; a change notice appears
for a change the operator can see and not for the minutes left ticking; the
arguments of a run and of an effect show their parameter names; and every
page passes axe-core's audit with no serious or critical finding; a row's
detail shows its run's context in place; and the server answers each page of
a 20,000-record run in under 300 ms.
Shares the driver of tests/test_web_browser.py (and skips where it does)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import stead
from stead import operator
from stead.roles import Role
from stead.web import Identity, create_app
from stead.web import server as web_server
from tests import stress, trace_app, web_app
from tests.test_web_browser import CHROMIUM, playwright_api
from tests.web_app import serving, settle

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")]

POLL = 0.3
TYPING = 60  # ms between keys
AXE = Path(__file__).parent / "fixtures" / "axe-core" / "axe.min.js"
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2,
         "is_mobile": True, "has_touch": True}
# Every finding axe-core rates serious or critical, as "rule: where".
_AUDIT = """async () => {
  const found = await axe.run(document, {resultTypes: ["violations"]});
  return found.violations.filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id}: ${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(" | ")}`);
}"""


class Console:
    """The dashboard served from a thread, on `clock`, and a browser to drive it.
    Who is logged in is the `x-test-operator` header; their roles, `held`."""

    def __init__(self, url: str, store: stead.Store, browser: Any, db: Path,
                 clock: stead.FakeClock, held: dict[str, frozenset[Role]]) -> None:
        self.url = url
        self.store = store
        self.browser = browser
        self.db = db
        self.clock = clock
        self.held = held
        self.client = stead.Client(store, web_app.app)

    async def page(self, who: str, roles: frozenset[Role], *, audit: bool = False,
                   **options: Any) -> Any:
        """A page in a browser context of its own, as `who` with `roles`;
        `audit` lets axe-core be injected (the page's CSP allows no other
        script than its own)."""
        self.held[who] = roles
        context = await self.browser.new_context(
            **{"viewport": {"width": 1366, "height": 768}, **options}, bypass_csp=audit,
            extra_http_headers={"x-test-operator": who})
        return await context.new_page()

    def take_over(self, run_id: str) -> None:
        """What a worker's claim does to a run, seen from the page: a new epoch."""
        with sqlite3.connect(self.db) as db:
            db.execute("UPDATE runs SET epoch = epoch + 1 WHERE run_id = ?", (run_id,))


@pytest.fixture
async def console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Console]:
    db = tmp_path / "console.db"
    url = f"sqlite:///{db}"
    clock = stead.FakeClock()
    opened = stead.open_store

    async def on_the_clock(db_url: str | None = None, **kw: Any) -> stead.Store:
        return await opened(db_url, clock=clock, **kw)

    # The dashboard opens its store in its own thread: on the test's clock.
    monkeypatch.setattr(web_server, "open_store", on_the_clock)
    store = await stead.open_store(url, clock=clock)
    held: dict[str, frozenset[Role]] = {}

    def named(request: Any) -> Identity | None:
        who = request.headers.get("x-test-operator")
        return Identity(who, held.get(who, frozenset())) if who else None

    asgi = create_app(web_app.app, db_url=url, auth=named, poll_seconds=POLL)
    try:
        with serving(asgi) as base:
            async with playwright_api.async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM,
                                                   args=["--no-sandbox"])
                yield Console(base, store, browser, db, clock, held)
                await browser.close()
    finally:
        await store.close()


async def polled(page: Any, times: int) -> None:
    """Wait until the queue page has polled `times` more times."""
    locator = page.locator("#attention")
    wanted = int(await locator.get_attribute("data-polls") or 0) + times
    deadline = time.monotonic() + (30 + times * POLL * 10) * stress.slow()
    while int(await locator.get_attribute("data-polls") or 0) < wanted:
        assert time.monotonic() < deadline, "the queue stopped polling"
        await asyncio.sleep(POLL / 3)


def row(page: Any, run_id: str) -> Any:
    return page.locator(f"li.item[data-run='{run_id}']")


async def opened(console: Console, who: str, roles: frozenset[Role], run_id: str
                 ) -> tuple[Any, Any]:
    """The inbox as `who`, once the workers settled, and the run's row, its details open."""
    await settle(console.store)
    page = await console.page(who, roles)
    await page.goto(f"{console.url}/attention")
    item = row(page, run_id)
    await item.locator("details.detail > summary").click()
    return page, item


async def test_a_viewer_sees_no_forms(console: Console) -> None:
    info = await console.client.start("approval", "21", task_id="order-21")
    await console.client.start("refund", "22")
    await settle(console.store)
    page = await console.page("vera", frozenset({Role.VIEWER}))
    await page.goto(f"{console.url}/attention")
    await row(page, info.run_id).wait_for()
    assert await page.locator("li.item").count() == 2
    # what, why, and the values it is bound to, and not one form or greyed control
    assert "order_id" in await row(page, info.run_id).inner_text()
    assert await page.locator("main form[method=post]").count() == 0
    assert await page.locator("[disabled], fieldset").count() == 0
    await row(page, info.run_id).locator("details.detail > summary").click()
    assert await row(page, info.run_id).locator("form").count() == 0
    await page.goto(f"{console.url}/runs/{info.run_id}")
    assert await page.locator("main form[method=post]").count() == 0
    assert "needs the role approver" in await page.locator("section.actions").inner_text()


async def test_an_approver_answers_from_the_inbox_with_the_keyboard_alone(
    console: Console,
) -> None:
    first = await console.client.start("long_review", "31", task_id="order-31")
    second = await console.client.start("approval", "32", task_id="order-32")
    await settle(console.store)
    page = await console.page("april", frozenset({Role.APPROVER}))
    await page.goto(f"{console.url}/attention")
    await row(page, second.run_id).wait_for()
    # an approver is offered Approve, in those words, and Cancel not at all
    assert await page.locator("form.compact button").all_inner_texts() == ["Approve", "Approve"]
    assert "as operator" not in await page.locator("main").inner_text()
    assert await page.locator("form[data-action=cancel]").count() == 0
    reason = "the customer confirmed the new address by phone, order 32, ticket 5521"
    await page.keyboard.press("j")  # the first row: the one without expiry comes last
    await playwright_api.expect(row(page, first.run_id)).to_be_focused()
    await page.keyboard.press("j")
    await playwright_api.expect(row(page, second.run_id)).to_be_focused()
    await page.keyboard.press("o")  # its details
    detail = row(page, second.run_id).locator("details.detail")
    await playwright_api.expect(detail).to_have_attribute("open", "")
    await page.keyboard.press("a")
    why = row(page, second.run_id).locator("form.compact input[name=why]")
    await playwright_api.expect(why).to_be_focused()
    await page.keyboard.type(reason, delay=TYPING)
    await polled(page, 2)
    await page.screenshot(path="/tmp/console-keyboard.png")
    # the whole reason is in view: the field is as wide as it needs
    assert await why.evaluate("(el) => el.scrollWidth <= el.clientWidth")
    await page.keyboard.press("Enter")
    await page.locator("h1.ok").wait_for()
    await playwright_api.expect(page.locator("a.back")).to_be_focused()
    await page.keyboard.press("Enter")  # back to the inbox: the next one
    await page.wait_for_url(f"{console.url}/attention")
    await page.keyboard.press("j")
    await playwright_api.expect(row(page, first.run_id)).to_be_focused()
    await page.keyboard.press("r")  # reject the other, with a reason and the box ticked
    reject = row(page, first.run_id).locator("form[data-action=reject]")
    await playwright_api.expect(reject.locator("[name=why]")).to_be_focused()
    await page.keyboard.type("duplicate of order 32", delay=TYPING)
    await page.keyboard.press("Tab")  # "I mean it"
    await page.keyboard.press("Space")
    await page.keyboard.press("Tab")
    await page.keyboard.press("Enter")
    await page.locator("h1.ok").wait_for()
    [approved] = await console.client.events(second.run_id)
    assert (approved.delivered_by, approved.delivered_why) == ("april", reason)
    [rejected] = await console.client.events(first.run_id)
    assert (rejected.delivered_by, rejected.delivered_why) == ("april", "duplicate of order 32")


async def test_an_approver_answers_from_a_phone(console: Console) -> None:
    refund = await console.client.start("refund", "41")
    info = await console.client.start("long_review", "42", task_id="order-42")
    await settle(console.store)
    page = await console.page("paula", frozenset({Role.APPROVER}), **PHONE)
    await page.goto(f"{console.url}/attention")
    # found by its kind's chip, below a stopped refund that is not hers to decide
    assert await row(page, refund.run_id).locator("form").count() == 0
    await page.locator("#counts a[data-kind=approval]").tap()
    await page.wait_for_url("**/attention?kind=approval")
    assert await page.locator("li.item").count() == 1
    item = row(page, info.run_id)
    await item.wait_for()
    # nothing wider than the phone: no sideways scrolling to find the button
    assert await page.evaluate("() => document.documentElement.scrollWidth") <= 390
    button = item.locator("form.compact button")
    box = await button.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 390 and box["height"] >= 30
    await page.screenshot(path="/tmp/console-phone.png", full_page=True)
    await item.locator("form.compact input[name=why]").tap()
    await page.keyboard.type("stock is back", delay=TYPING)
    await button.tap()
    await page.locator("h1.ok").wait_for()
    [event] = await console.client.events(info.run_id)
    assert (event.delivered_by, event.delivered_why) == ("paula", "stock is back")


async def test_a_change_notice_appears_only_for_a_change_that_shows(console: Console) -> None:
    info = await console.client.start("expiring", "T-51", task_id="ticket-T-51")
    await settle(console.store)
    page = await console.page("otto", frozenset({Role.OPERATOR}))
    await page.goto(f"{console.url}/attention")
    item = row(page, info.run_id)
    due = item.locator(".due")
    assert await due.inner_text() == "20 min left"
    why = item.locator("form.compact input[name=why]")
    await why.press_sequentially("reviewed with the customer", delay=TYPING)
    # five minutes pass while the operator types: the time left ticks, in place
    console.clock.advance(300)
    await playwright_api.expect(due).to_have_text("15 min left")
    await polled(page, 3)
    assert await item.locator(".notice").is_hidden()
    assert "changed" not in (await item.get_attribute("class") or "")
    # a worker takes the run over: that the operator can see, and is told what
    console.take_over(info.run_id)
    notice = item.locator(".notice")
    await notice.wait_for()
    said = await notice.inner_text()
    assert "the run was waiting at epoch 1, it is waiting at epoch 2 now" in said, said
    assert await why.input_value() == "reviewed with the customer"
    await page.screenshot(path="/tmp/console-notice.png", full_page=True)


async def test_arguments_show_their_names(console: Console) -> None:
    refund = await console.client.start("refund", "o-7731", task_id="order-7731")
    page, item = await opened(console, "otto", frozenset({Role.OPERATOR}), refund.run_id)
    tables = item.locator("table.named")
    # the effect's arguments, then the run's input, each by parameter name
    assert await tables.nth(0).locator("th").all_inner_texts() == ["order"]
    assert await tables.nth(0).locator("td").all_inner_texts() == ["o-7731"]
    assert await tables.nth(1).locator("th").all_inner_texts() == ["order_id"]
    json = item.locator("details.json").first
    await json.locator("summary").click()
    assert '"names": [' in await json.locator("pre").inner_text()
    await page.goto(f"{console.url}/runs/{refund.run_id}")
    effect = page.locator("tr.effect td.arguments table.named")
    assert await effect.locator("th").all_inner_texts() == ["order"]
    # a step's arguments, on the run's timeline: by name, the JSON a click away
    shipped = await stead.Client(console.store, trace_app.app).start(
        "quote", "o-7731", 3, gift=True)
    await stead.Worker(trace_app.app, console.store,
                       stead.WorkerOptions(poll_interval=0.01)).run_until_idle()
    await page.goto(f"{console.url}/runs/{shipped.run_id}")
    await page.locator("nav.tabs a[data-tab=timeline]").click()
    called = page.locator("tr.step table.named").first
    assert await called.locator("th").all_inner_texts() == ["order", "quantity", "gift"]
    assert await called.locator("td").all_inner_texts() == ["o-7731", "3", "true"]
    step_json = page.locator("tr.step details.json").first
    await step_json.locator("summary").click()
    assert '"names": [' in await step_json.locator("pre").inner_text()


async def test_a_rows_detail_shows_its_runs_context_in_place(console: Console) -> None:
    advised = await console.client.start("advised", "o-88", 4217, task_id="order-88")
    lapsed = stead.Intent(goal="refund order 9", grants=[
        stead.Grant("dispatch_refund", {"order": "9"}, expires_at=console.clock.now() - 60)])
    paused = await console.client.start("granted", "9", intent=lapsed)
    page, item = await opened(console, "april", frozenset({Role.APPROVER}), advised.run_id)
    panel = item.locator("details.detail .panel")
    # the conversation that led to the approval, without leaving the inbox
    assert "Order o-88 was charged twice; refund 4217." in await panel.locator(
        "article.turn p.said").inner_text()
    other = row(page, paused.run_id)
    await other.locator("details.detail > summary").click()
    # the intent in force and what changed at its last resume, in place
    assert "intent v1: refund order 9" in await other.locator("pre.intent").inner_text()
    assert "Since its last resume (epoch 1)" in await other.inner_text()
    await page.screenshot(path="/tmp/console-detail.png", full_page=True)


async def test_every_page_passes_the_accessibility_audit(console: Console) -> None:
    refund = await console.client.start("refund", "61", task_id="order-61")
    await console.client.start("refund", "60", task_id="order-60")
    await console.client.start("long_review", "62", task_id="order-62")
    await console.client.start("asking", 63)
    await console.client.start("granted", "64", intent=web_app.expired_grant())
    await console.client.start("advised", "o-65", 65)
    done = await console.client.start("echo", "hello")
    await settle(console.store)
    await operator.act(console.client, "reconcile", operator.Decision(
        run_id=refund.run_id, target=f"{refund.run_id}:0",
        values={"decision": "happened", "result": '{"refund": "rf_1"}'},
        by="otto", why="seen in the bank's dashboard"))
    await settle(console.store)
    traced = stead.Client(console.store, trace_app.app)
    shipped = await traced.start("ship", "o-9", {"city": "Lyon", "street": "12 rue de la Paix"})
    quoted = await traced.start("quote", "o-7731", 3, gift=True)
    await stead.Worker(trace_app.app, console.store,
                       stead.WorkerOptions(poll_interval=0.01)).run_until_idle()
    chat = await console.client.start("chat", "65")
    await settle(console.store)
    pages = [f"/runs/{quoted.run_id}?tab=timeline",
        "/login", "/runs", "/runs?status=completed", "/attention", "/attention?kind=approval",
        f"/runs/{done.run_id}", f"/runs/{refund.run_id}/trace", f"/runs/{shipped.run_id}",
        f"/runs/{chat.run_id}?tab=conversation",
        *(f"/runs/{refund.run_id}?tab={tab}" for tab in
          ("overview", "timeline", "conversation", "context", "workspace", "resumes", "audit")),
        "/runs/nope",
    ]
    for who, roles, options in (("otto", frozenset(Role), {}),
                                ("vera", frozenset({Role.VIEWER}), PHONE)):
        page = await console.page(who, roles, audit=True, **options)
        for path in pages:
            await page.goto(f"{console.url}{path}")
            for details in await page.locator("details").all():  # audit what opens, too
                await details.evaluate("(d) => { d.open = true; }")
            await page.add_script_tag(path=str(AXE))
            found = await page.evaluate(_AUDIT)
            assert found == [], f"{who} on {path}: {found}"


# The server's time for a page: from the request sent to the answer's first
# byte, as the browser's navigation timing tells it (on loopback, the server's).
_SERVER_MS = """() => { const n = performance.getEntriesByType('navigation')[0];
  return n.responseStart - n.requestStart; }"""
BUDGET_MS = 300


async def test_the_server_answers_each_page_of_a_20000_record_run_in_under_300_ms(
    console: Console,
) -> None:
    run_id = await trace_app.long_run(stead.Client(console.store, trace_app.app), 20_000)
    await console.client.start("long_review", "71", task_id="order-71")
    await settle(console.store)
    page = await console.page("otto", frozenset({Role.OPERATOR}))
    took: dict[str, float] = {}
    where: dict[str, str] = {}

    async def timed(name: str) -> None:
        took[name], where[name] = float(await page.evaluate(_SERVER_MS)), page.url

    # as a person goes: the run page, each of its tabs, the timeline's last page, the inbox
    await page.goto(f"{console.url}/runs/{run_id}")
    await timed("overview")
    for tab in ("timeline", "trace", "conversation", "context", "workspace", "resumes",
                "audit"):
        await page.locator(f"nav.tabs a[data-tab={tab}]").click()
        await page.wait_for_load_state("load")
        await timed(tab)
    await page.goto(f"{console.url}/runs/{run_id}?tab=timeline&start={20_000 - 200}")
    await timed("timeline, last page")
    await page.goto(f"{console.url}/attention")
    await timed("needs a human")
    # a page once slow on a loaded box is asked again: the worst of the best of three
    for name, ms in list(took.items()):
        if ms >= BUDGET_MS:
            retried = []
            for _ in range(2):
                await page.goto(where[name])
                retried.append(float(await page.evaluate(_SERVER_MS)))
            took[name] = min(ms, *retried)
    budget = BUDGET_MS * stress.slow()
    assert len(took) == 10 and all(ms < budget for ms in took.values()), (budget, took)
