"""`python -m bench.web_pages [--db sqlite|postgres|both] [--repeat N]`

The run page of a long run: time to first byte and time to interactive for
a 2,000-record and a 20,000-record run, each tab of its page (the overview,
the first and last page of the timeline, the trace, the conversation,
intent, workspace, resume records and audit), and the needs-a-human page
beside them. The dashboard is served by uvicorn on loopback (a thread of
this process); the runs are built as imports of a real run's journal,
extended (`tests/trace_app.py:long_run`). Time to first byte is measured
with httpx (the request sent to the first byte of the answer: on loopback,
the server's time); time to interactive by headless Chromium's navigation
timing (`domInteractive` and the load event, from the navigation's start).
Writes the medians into bench/RESULTS.md under "Run page"."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import async_playwright

import stead
import stead.keys
from bench import webhook
from stead.web import create_app
from tests import trace_app
from tests.web_app import serving

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Run page"
CHROMIUM = os.environ.get("STEAD_CHROMIUM", "/usr/bin/chromium")
SIZES = (2_000, 20_000)
TARGET_MS = 300


async def _first_byte(http: httpx.AsyncClient, path: str) -> tuple[float, int]:
    began = time.perf_counter()
    async with http.stream("GET", path) as r:
        chunks = r.aiter_bytes()
        first = await chunks.__anext__()
        took = time.perf_counter() - began
        size = len(first) + sum([len(c) async for c in chunks])
        assert r.status_code == 200, (path, r.status_code)
    return took * 1000, size


async def _interactive(page: Any, url: str) -> tuple[float, float]:
    await page.goto(url, wait_until="load")
    timing = await page.evaluate(
        "() => { const n = performance.getEntriesByType('navigation')[0];"
        " return [n.domInteractive - n.startTime, n.loadEventEnd - n.startTime]; }")
    return float(timing[0]), float(timing[1])


async def measure(url: str, repeat: int) -> list[dict[str, Any]]:
    store = await stead.open_store(url)
    client = stead.Client(store, trace_app.app)
    runs = {n: await trace_app.long_run(client, n) for n in SIZES}
    await store.close()
    pages = []
    for n, run_id in runs.items():
        pages += [(n, "overview", f"/runs/{run_id}"),
                  (n, "timeline, first page", f"/runs/{run_id}?tab=timeline"),
                  (n, "timeline, last page", f"/runs/{run_id}?tab=timeline&start={n - 200}"),
                  (n, "trace, first page", f"/runs/{run_id}/trace"),
                  *((n, f"{tab} tab", f"/runs/{run_id}?tab={tab}") for tab in (
                      "conversation", "context", "workspace", "resumes", "audit"))]
    pages.append((max(SIZES), "needs a human", "/attention"))
    asgi = create_app(trace_app.app, db_url=url, public=True, poll_seconds=60)
    found = []
    with serving(asgi) as base:
        async with httpx.AsyncClient(base_url=base) as http, async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = await browser.new_page()
            for n, what, path in pages:
                await _first_byte(http, path)  # warm: templates compiled, caches filled
                bytes_ = [await _first_byte(http, path) for _ in range(repeat)]
                shown = [await _interactive(page, base + path) for _ in range(repeat)]
                found.append({
                    "records": n, "page": what, "bytes": bytes_[0][1],
                    "ttfb": [b[0] for b in bytes_], "interactive": [s[0] for s in shown],
                    "load": [s[1] for s in shown]})
                print(f"{n:>6} {what:<22} {bytes_[0][1]:>7,} B  ttfb "
                      f"{statistics.median(found[-1]['ttfb']):6.1f} ms  interactive "
                      f"{statistics.median(found[-1]['interactive']):6.1f} ms")
            await browser.close()
    return found


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def _markdown(results: dict[str, list[dict[str, Any]]], when: str, load: float,
              repeat: int) -> str:
    lines = [SECTION, "",
             f"Written by `python -m bench.web_pages` on {when} (load average {load:.2f} when "
             f"it began; {repeat} measurements a cell, after one warm-up). Cells are "
             "`median (min-max)` in ms. First byte: httpx on loopback, request sent to the "
             "answer's first byte (the server's time). Interactive and load: Chromium's "
             "navigation timing (`domInteractive`, `loadEventEnd`). A page of the timeline "
             f"is 200 records; the target is under {TARGET_MS} ms of server time for one.",
             "", "| db | run | page | bytes | first byte | interactive | load |",
             "|---|---|---|---|---|---|---|"]
    for db, rows in results.items():
        for r in rows:
            lines.append(f"| {db} | {r['records']:,} records | {r['page']} | {r['bytes']:,} | "
                         f"{_cell(r['ttfb'])} | {_cell(r['interactive'])} | "
                         f"{_cell(r['load'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="sqlite")
    parser.add_argument("--repeat", type=int, default=5)
    ns = parser.parse_args()
    load = os.getloadavg()[0]
    results = {}
    schema = f"bench_pages_{os.getpid()}"
    with tempfile.TemporaryDirectory() as scratch:
        urls = {}
        if ns.db in ("sqlite", "both"):
            urls["SQLite"] = f"sqlite:///{scratch}/pages.db"
        if ns.db in ("postgres", "both"):
            pg = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
            urls["PostgreSQL"] = f"{pg}{'&' if '?' in pg else '?'}schema={schema}"
            os.environ.setdefault("STEAD_KEY_FILE", f"{scratch}/keys")
            stead.keys.ensure_file(os.environ["STEAD_KEY_FILE"])
        for db, url in urls.items():
            print(db)
            try:
                results[db] = asyncio.run(measure(url, ns.repeat))
            finally:
                if db == "PostgreSQL":
                    webhook.drop_schema(pg, schema)
    webhook.record(_markdown(results, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                             load, ns.repeat), ROOT / "bench" / "RESULTS.md", SECTION)


if __name__ == "__main__":
    main()
