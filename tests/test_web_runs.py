"""The runs list and the run page over HTTP (both stores): search, filters
and keyset pages kept in the URL, bad query values refused with 400, every
value readable in full, the timeline in pages, live parts that answer 204
while nothing changed and stop polling once the run ended, and the trace of
a run that was taken over."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

import stead
from stead import run_ids
from stead.web import create_app, views
from tests import trace_app

BASE = "http://127.0.0.1:8484"
QUEUED = 1.0  # seconds a run waits for its first claim in the trace test


def _dashboard(store: stead.Store) -> httpx.AsyncClient:
    asgi = create_app(trace_app.app, store=store, public=True)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url=BASE)


@pytest.fixture
async def web(store: stead.Store) -> AsyncIterator[httpx.AsyncClient]:
    async with _dashboard(store) as http:
        yield http


async def _settle(store: stead.Store) -> None:
    await stead.Worker(trace_app.app, store,
                       stead.WorkerOptions(poll_interval=0.01)).run_until_idle()


def _listed(html: str) -> list[str]:
    return re.findall(r'<tr data-run="([0-9a-f]+)"', html)


async def test_the_runs_list_filters_searches_and_pages_with_the_filters_kept(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, trace_app.app)
    ships = [await client.start("ship", f"o-{i}", {"city": "Lyon"}, task_id=f"order-{i}")
             for i in range(5)]
    queued = await client.start("long", 1, queue="slow")
    await _settle(store)
    searched = await web.get("/runs", params={"q": "order-3"})
    assert _listed(searched.text) == [ships[3].run_id]
    by_prefix = await web.get("/runs", params={"q": ships[1].run_id[:30]})
    assert _listed(by_prefix.text) == [ships[1].run_id]
    # What the list shows of a run id finds it too (every dated id begins alike).
    by_shown = await web.get("/runs", params={"q": run_ids.short(ships[1].run_id)[:8]})
    assert _listed(by_shown.text) == [ships[1].run_id]
    assert _listed((await web.get("/runs", params={"queue": "slow"})).text) == [queued.run_id]
    assert _listed((await web.get("/runs", params={"workflow": "long@1"})).text) == [
        queued.run_id]
    assert _listed((await web.get("/runs", params={"workflow": "long@2"})).text) == []
    assert _listed((await web.get("/runs", params={"until": "2000-01-01T00:00"})).text) == []
    assert len(_listed((await web.get("/runs", params={"since": "2000-01-01T00:00"})).text)) == 6
    # Two at a time, following each Next link: every ship once, newest first, filters kept.
    seen: list[str] = []
    link: str | None = "/runs?workflow=ship%401&status=completed&limit=2"
    while link is not None:
        page = await web.get(link.replace("&amp;", "&"))
        assert page.status_code == 200 and 'value="ship@1"' in page.text
        seen += _listed(page.text)
        found = re.search(r'<a href="([^"]+)" rel="next">', page.text)
        link = found.group(1) if found else None
        assert link is None or "workflow=ship%401" in link
    assert seen == [s.run_id for s in sorted(ships, key=lambda s: (s.created_at, s.run_id),
                                             reverse=True)]


@pytest.mark.parametrize("query", [
    "status=nope", "workflow=ship@x", "workflow=ship@-1", "workflow=ship@99999999999",
    "limit=0", "limit=-3", "limit=NaN", "limit=99999999999999999999", "limit=1e3",
    "since=yesterday", "until=2026-13-45", "after=nan~abc", "after=-5~abc", "after=1e300~a",
    "after=12", "q=" + "x" * 300, "q=a%00b", "task_id=%00", "after=1.5~a%00",
])
async def test_a_runs_query_it_cannot_take_is_refused_with_400(
    web: httpx.AsyncClient, query: str,
) -> None:
    r = await web.get(f"/runs?{query}")
    assert r.status_code == 400, r.text
    assert "Not a query this page takes" in r.text


@pytest.mark.parametrize("query", ["start=-1", "start=NaN", "start=1e9", "limit=0",
                                   "limit=100000", "start=" + "9" * 30])
async def test_a_run_page_query_it_cannot_take_is_refused_with_400(
    web: httpx.AsyncClient, store: stead.Store, query: str,
) -> None:
    run = await stead.Client(store, trace_app.app).start("long", 1)
    for path in (f"/runs/{run.run_id}", f"/runs/{run.run_id}/trace"):
        assert (await web.get(f"{path}?{query}")).status_code == 400


async def test_the_run_page_shows_every_value_whole_on_demand(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, trace_app.app)
    run = await client.start("ship", "o-9", {"city": "Lyon", "street": "12 rue de la Paix"})
    await _settle(store)
    html = (await web.get(f"/runs/{run.run_id}")).text
    # The input and the effect's arguments by parameter name (the workflow's
    # signature names the input; the effect's record names its own), each
    # with its JSON one click away; the result in closed <details>.
    assert '<section class="input"' in html
    assert '<th scope="row">order</th><td><code>o-9</code></td>' in html
    assert html.count('<th scope="row">address</th>') == 2  # the input and the effect's
    json_of = '<details class="value json"><summary>JSON</summary><pre tabindex="0">'
    assert json_of + "{\n  &#34;args&#34;" in html
    assert "&#34;street&#34;: &#34;12 rue de la Paix&#34;" in html
    assert "&#34;names&#34;: [\n    &#34;order&#34;,\n    &#34;address&#34;\n  ]" in html
    assert '<div class="result">Result: <details class="value">' in html
    # The effect's key whole (in its title and copy button) and its history with times.
    key = f"{run.run_id}:1"
    assert f'title="{key}"' in html and f'data-copy="{key}"' in html
    assert re.search(r'<ol class="history"><li><span class="phase intent">intent</span> '
                     r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ \(attempt 1, epoch 1\)", html)
    # The short run id, whole on hover and copyable.
    assert f'<code title="{run.run_id}">{run_ids.short(run.run_id)}…</code>' in html
    assert "<script" not in html.split("</head>")[1]  # nothing inline: the CSP holds


async def test_a_long_run_page_shows_one_page_of_its_timeline(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    run_id = await trace_app.long_run(stead.Client(store, trace_app.app), 2_000)
    assert '<tr class="step ok"' not in (await web.get(f"/runs/{run_id}")).text  # the overview
    first = await web.get(f"/runs/{run_id}?tab=timeline")
    assert first.status_code == 200
    assert len(re.findall(r'<tr class="step ok" id="seq-', first.text)) == 200
    assert len(first.content) < 120_000  # one page, not the 2,000-record table
    assert "The journal holds 2000 record(s), up to seq 1999" in first.text
    assert 'href="/runs/' + run_id + '?tab=timeline&amp;start=200" rel="next"' in first.text
    last = await web.get(f"/runs/{run_id}?start=1800")  # a window without a tab: the timeline
    rows = re.findall(r'id="seq-(\d+)"', last.text)
    assert rows[0] == "1800" and rows[-1] == "1999" and len(rows) == 200
    assert 'rel="next"' not in last.text and 'rel="prev"' in last.text


async def test_the_live_part_answers_204_until_something_changes_and_stops_polling_when_done(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    client = stead.Client(fstore, trace_app.app)
    run = await client.start("crashy", uuid.uuid4().hex)
    async with _dashboard(fstore) as web:
        page = (await web.get(f"/runs/{run.run_id}")).text
        poll = re.search(r'<div id="live" hx-get="([^"]+)" hx-trigger="every', page)
        assert poll, "a live run's part polls"
        url = poll.group(1).replace("&amp;", "&")
        assert (await web.get(url)).status_code == 204  # nothing changed: nothing swapped
        await stead.Worker(trace_app.app, fstore).run_until_idle()  # dies in charge
        moved = await web.get(url)
        assert moved.status_code == 200 and 'id="live"' in moved.text
        clock.advance(60)
        await stead.Worker(trace_app.app, fstore).run_until_idle()
        done = await web.get(url)
        assert done.status_code == 200 and "completed" in done.text
        assert "hx-trigger" not in done.text  # a finished run's page stops polling
        assert "hx-trigger" not in (await web.get(f"/runs/{run.run_id}")).text.split(
            '<div id="live"')[1].split(">")[0]


async def test_the_trace_of_a_run_taken_over_marks_the_takeover(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    client = stead.Client(fstore, trace_app.app)
    run = await client.start("crashy", uuid.uuid4().hex)
    await stead.Worker(trace_app.app, fstore).run_until_idle()  # dies in charge
    clock.advance(60)
    await stead.Worker(trace_app.app, fstore).run_until_idle()
    [resume] = await client.resumes(run.run_id)
    async with _dashboard(fstore) as web:
        html = (await web.get(f"/runs/{run.run_id}/trace")).text
    bars = re.findall(r'<tr class="bar (\w+)( taken-over)?" data-kind="(\w+)" '
                      r'data-name="(\w+)">', html)
    assert [(b[0], b[2], b[3]) for b in bars] == [("ok", "step", "reserve"),
                                                  ("ok", "step", "charge")]
    assert bars[1][1] == " taken-over" and bars[0][1] == ""  # it died in charge
    assert "taken over (epochs 1, 2)" in html
    assert f"epoch {resume.epoch} by {resume.worker_id}" in html
    assert html.count('class="takeover"/>') == 2  # the mark, on each bar's lane
    assert "<rect " in html and "style=" not in html.split("<main>")[1]


def _bars(html: str) -> dict[str, tuple[str, bool]]:
    """Each bar of a trace page by call name: its outcome, and whether it is
    drawn taken over."""
    found = re.findall(r'<tr class="bar (\w+)( taken-over)?" data-kind="\w+" '
                       r'data-name="(\w+)">', html)
    return {name: (outcome, bool(over)) for outcome, over, name in found}


async def test_a_trace_marks_the_takeover_at_the_claim_and_shows_the_time_queued(
    store: stead.Store,
) -> None:
    # The real clock: the takeover's first write comes a little after the
    # call it journals, the claim well before it, as on any machine.
    client = stead.Client(store, trace_app.app)
    run = await client.start("crashy_then_ship", uuid.uuid4().hex)
    await asyncio.sleep(QUEUED)  # no worker yet
    lease = stead.WorkerOptions(lease_seconds=0.5, poll_interval=0.01)
    await stead.Worker(trace_app.app, store, lease).run_until_idle()  # dies in charge
    await asyncio.sleep(0.6)
    await stead.Worker(trace_app.app, store, lease).run_until_idle()
    assert (await client.get(run.run_id)).status == "completed"
    [resume] = await client.resumes(run.run_id)
    claimed = resume.details.claimed_at
    journal = {r.name: r for r in await client.journal(run.run_id)}
    assert claimed is not None and claimed < journal["charge"].at <= resume.at
    async with _dashboard(store) as web:
        html = (await web.get(f"/runs/{run.run_id}/trace")).text
    bars = _bars(html)
    assert bars == {"reserve": ("ok", False), "charge": ("ok", True), "ship": ("ok", False)}
    # The time before the first claim is its own row, not part of the first call.
    queued = re.search(r'<tr class="queued"[^>]*>.*?<td>([0-9.]+)s</td>', html, re.S)
    assert html.count('class="takeover"/>') == 3  # the mark, on each bar's lane
    reserve = re.search(r'data-name="reserve">.*?<td>([0-9.]+)s', html, re.S)
    assert queued is not None and reserve is not None, html
    assert float(queued.group(1)) >= QUEUED > float(reserve.group(1))
    info = await client.get(run.run_id)
    assert info.started_at is not None and info.started_at - info.created_at >= QUEUED


async def test_the_runs_list_polls_with_its_filters_and_answers_204_until_a_run_changes(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, trace_app.app)
    await client.start("long", 1, task_id="ticks-1")
    page = (await web.get("/runs", params={"q": "ticks", "limit": "5"})).text
    poll = re.search(r'<div id="runs" hx-get="([^"]+)" hx-trigger="every', page)
    assert poll
    url = poll.group(1).replace("&amp;", "&")
    assert "q=ticks" in url and "limit=5" in url
    assert (await web.get(url)).status_code == 204
    await _settle(store)  # the run completes: the list shows it
    changed = await web.get(url)
    assert changed.status_code == 200 and "completed" in changed.text


async def test_each_tab_of_the_run_page_has_a_deep_link(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, trace_app.app)
    run = await client.start("ship", "o-9", {"city": "Lyon", "street": "1 quai"})
    await _settle(store)
    overview = (await web.get(f"/runs/{run.run_id}")).text
    for tab in views.TABS:
        if tab == "trace":
            continue  # its own page, linked from every tab
        assert f'href="/runs/{run.run_id}?tab={tab}' in overview or tab == "overview"
        page = await web.get(f"/runs/{run.run_id}", params={"tab": tab})
        assert page.status_code == 200, tab
        assert re.search(rf'data-tab="{tab}" aria-current="page"', page.text), tab
        # its live part polls for the same tab
        assert f"fragment=1&amp;tab={tab}&amp;" in page.text, tab
    assert f'href="/runs/{run.run_id}/trace?start=0"' in overview
    trace = (await web.get(f"/runs/{run.run_id}/trace")).text
    assert 'data-tab="trace" aria-current="page"' in trace
    assert (await web.get(f"/runs/{run.run_id}", params={"tab": "nope"})).status_code == 400
