"""The chat page of docs/guides/platform/many-customers.md in headless
Chromium (Debian's `chromium`, driven by Playwright): served from its own
origin, it reads a run's answer from the dashboard's server with
`EventSource` on an end-user stream token, with no login; the server ends
each response after a second, and the browser reconnects with
Last-Event-ID and gets the rest, nothing twice. A revoked token, and a
token for another stream, end the page's connection for good."""

from __future__ import annotations

import asyncio
import html
import re
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

import stead
from stead.web import create_app
from tests import stress
from tests.helpers import Gate

# The dashboard's browser tests find Chromium, and skip (slow, or without it), alike.
from tests.test_web_browser import CHROMIUM, playwright_api, pytestmark  # noqa: F401
from tests.web_app import UI_TOKEN, serving

PAGE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "platform" / \
    "many-customers.md"

app = stead.App("chat-page")


class _Held:
    gate = Gate()  # a fresh one per test (see the test)


@app.workflow(version=1)
async def chat(run: stead.Run, question: str) -> str:
    answer = run.stream("answer")
    await answer.append("You")
    await answer.append("asked:")
    await run.step("gate", _Held.gate.step)
    await answer.append(question)
    await answer.close()
    return question


def chat_page() -> str:
    """The docs' chat page: the one ```html block that reads an EventSource."""
    found = re.findall(r"```html\n(.*?)```", PAGE.read_text(), re.S)
    [page] = [p for p in found if "new EventSource" in p]
    return str(page)


class Recorder:
    """The dashboard's ASGI app, noting each stream request's Last-Event-ID."""

    def __init__(self, asgi: Any) -> None:
        self.asgi = asgi
        self.last_ids: list[str | None] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and "/streams/" in scope["path"]:
            headers = dict(scope["headers"])
            given = headers.get(b"last-event-id")
            self.last_ids.append(None if given is None else given.decode())
        await self.asgi(scope, receive, send)


def site(urls: dict[str, str]) -> Starlette:
    """The app's own site: the chat page, its stream URL filled in."""
    page = chat_page()

    async def show(request: Request) -> HTMLResponse:
        url = urls[request.path_params["which"]]
        return HTMLResponse(page.replace("{{ stream_url }}", html.escape(url, quote=True)))

    return Starlette(routes=[Route("/chat/{which}", show)])


async def test_the_docs_chat_page_reads_its_answer_and_reconnects(sqlite_url: str) -> None:
    _Held.gate = gate = Gate()
    store = await stead.open_store(sqlite_url)
    try:
        client = stead.Client(store, app, tenant="acme")
        info = await client.start(chat, "why?")
        worker = asyncio.create_task(stead.Worker(
            app, store, stead.WorkerOptions(poll_interval=0.01)).run_until_idle())
        token = await client.stream_token(info.run_id, ttl=600, stream="answer")
        revoked = await client.stream_token(info.run_id, ttl=600)
        await client.revoke_stream_token(revoked)
        notes = await client.stream_token(info.run_id, ttl=600, stream="notes")
        dashboard = Recorder(create_app(app, db_url=sqlite_url, token=UI_TOKEN,
                                        stream_seconds=1.0))
        with serving(dashboard) as base:
            stream = f"{base}/runs/{info.run_id}/streams"
            urls = {"live": f"{stream}/answer?{token.query()}",
                    "revoked": f"{stream}/answer?{revoked.query()}",
                    "other": f"{stream}/answer?{notes.query()}"}
            with serving(site(urls)) as own:
                assert own != base  # another origin: the stream is read across origins
                async with playwright_api.async_playwright() as pw:
                    browser = await pw.chromium.launch(executable_path=CHROMIUM,
                                                       args=["--no-sandbox"])
                    page = await browser.new_page()
                    page.set_default_timeout(30_000 * stress.slow())
                    await page.goto(f"{own}/chat/live")
                    answer, status = page.locator("#answer"), page.locator("#status")
                    await playwright_api.expect(answer).to_have_text("You asked:")
                    await asyncio.wait_for(gate.reached.wait(), 30)
                    # The server ends each response after a second: the page reconnects
                    # with the last offset it got.
                    for _ in range(200):
                        if "2" in dashboard.last_ids:
                            break
                        await asyncio.sleep(0.05)
                    assert dashboard.last_ids[0] is None and "2" in dashboard.last_ids
                    gate.open.set()
                    await playwright_api.expect(status).to_have_text("Done.")
                    await playwright_api.expect(answer).to_have_text("You asked: why?")
                    # A revoked token, and one for another stream: closed for good.
                    for which in ("revoked", "other"):
                        other = await browser.new_page()
                        await other.goto(f"{own}/chat/{which}")
                        await playwright_api.expect(other.locator("#status")).to_have_text(
                            "This link has expired: reload the page.")
                        assert await other.locator("#answer").text_content() == ""
                    await browser.close()
        await asyncio.wait_for(worker, 30)
        assert await client.result(info.run_id, timeout=10) == "why?"
    finally:
        await store.close()
