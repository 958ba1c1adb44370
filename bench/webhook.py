"""`python -m bench.webhook [--db sqlite|postgres] [--waits N] [--per-wait K]`

The event webhook under load: N runs wait for one approval each; `stead ui`
serves the webhook in its own process on loopback; N x K deliveries (half
of them redeliveries of one event id per wait, half new event ids, each with
the wait's token) are sent at once over as many connections. Each wait must
have exactly one `Accepted`; every other answer is a `Duplicate` or
`Rejected(already_consumed)`. Prints the answers' latencies (send → answer)
and writes them into bench/RESULTS.md under "Webhook" (stead only: the peers
have no webhook of their own). `measure` is also what tests/test_web_load.py runs.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

import stead
import stead.keys
from stead.workflow.waits import sign

app = stead.App("bench_webhook")


@app.workflow()
async def approval(run: stead.Run, n: int) -> Any:
    return await (await run.wait("approval", bind={"n": n}))


ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(db_url: str) -> Iterator[str]:
    """`stead ui bench.webhook:app` in a process of its own; yields its URL."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("STEAD_UI_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "stead", "--db", db_url, "ui", "bench.webhook:app",
         "--port", str(port), "--read-only"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"stead ui did not start: {err}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


async def _waiting(store: stead.Store, waits: int) -> list[tuple[str, str, str, int]]:
    client = stead.Client(store, app)
    ids = [(await client.start("approval", n)).run_id for n in range(waits)]
    await stead.Worker(app, store, stead.WorkerOptions(concurrency=32)).run_until_idle()
    ring = await store.keyring()
    found = []
    for n, run_id in enumerate(ids):
        [w] = await client.waits(run_id=run_id)
        found.append((run_id, w.wait_id, sign(ring.current, run_id, w.wait_id), n))
    return found


def _pct(xs: list[float], p: float) -> float:
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def measure(db_url: str, *, waits: int = 100, per_wait: int = 10) -> dict[str, Any]:
    """Deliver `waits * per_wait` events at once to a webhook served by
    another process; return the verdicts per wait and the latencies (ms)."""
    store = await stead.open_store(db_url)
    try:
        targets = await _waiting(store, waits)
    finally:
        await store.close()
    jobs = []
    for run_id, wait_id, token, n in targets:
        for i in range(per_wait):
            event = f"{wait_id}-same" if i % 2 == 0 else f"{wait_id}-{i}"
            body = json.dumps({"event_id": event, "wait_id": wait_id, "bind": {"n": n},
                               "payload": {"approved": True, "i": i}, "token": token})
            jobs.append((run_id, wait_id, body))
    verdicts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    latencies: list[float] = []
    with serving(db_url) as url:
        limits = httpx.Limits(max_connections=len(jobs), max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as http:
            gate = asyncio.Event()

            async def send(run_id: str, wait_id: str, body: str) -> None:
                await gate.wait()
                t = time.perf_counter()
                r = await http.post(f"/hooks/runs/{run_id}/events", content=body,
                                    headers={"content-type": "application/json"})
                latencies.append((time.perf_counter() - t) * 1000)
                answer = r.json()
                verdicts[wait_id][answer.get("reason") or answer.get("verdict", r.status_code)
                                  ] += 1

            tasks = [asyncio.create_task(send(*job)) for job in jobs]
            await asyncio.sleep(0.1)
            start = time.perf_counter()
            gate.set()
            await asyncio.gather(*tasks)
            wall = time.perf_counter() - start
    latencies.sort()
    return {
        "deliveries": len(jobs), "waits": waits, "wall_seconds": wall,
        "per_second": len(jobs) / wall, "p50": _pct(latencies, 50), "p95": _pct(latencies, 95),
        "p99": _pct(latencies, 99), "max": latencies[-1],
        "verdicts": {w: dict(c) for w, c in verdicts.items()},
    }


SECTION = "## Webhook: 1,000 concurrent deliveries on loopback (issue 18)"


def _markdown(results: dict[str, dict[str, Any]], when: str, load: float) -> str:
    lines = [
        SECTION, "",
        f"Written by `python -m bench.webhook` on {when}, stead only (the peers have no "
        "webhook). `stead ui` serves `POST /hooks/runs/RUN/events` from its own process; "
        "100 runs wait for one approval each; 1,000 deliveries (10 per wait: 5 "
        "redeliveries of one event id, 5 new ids, each with the wait's token) are "
        "released at once, one connection each. Latency is send → answer in the "
        f"sender. Load average (1 min) when it began: {load:.2f} on "
        f"{os.cpu_count()} cores shared with other work.", "",
        "| db | deliveries | wall (s) | deliveries/s | p50 (ms) | p95 (ms) | p99 (ms) "
        "| max (ms) | accepted per wait |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for db, r in results.items():
        accepted = sorted({v.get("accepted", 0) for v in r["verdicts"].values()})
        lines.append(
            f"| {db} | {r['deliveries']:,} | {r['wall_seconds']:.2f} | {r['per_second']:.0f} "
            f"| {r['p50']:.0f} | {r['p95']:.0f} | {r['p99']:.0f} | {r['max']:.0f} "
            f"| {', '.join(map(str, accepted))} |")
    fits = all(_one_accepted(r) for r in results.values())
    lines += ["", (
        "Each wait got exactly one `accepted`; every other answer was `duplicate` or "
        "`rejected: already_consumed` (checked by the bench; tests/test_web_load.py asserts "
        "it on both stores)." if fits else
        "**Not every wait got exactly one `accepted`**: see the verdicts the bench printed."),
        "", "Reading it: each delivery is one durable transaction (lock the run, judge the "
        "event, store it, consume the wait) and deliveries are not group-committed, so the "
        "store takes them one commit at a time: deliveries/s is about its rate of "
        "durable commits, and the latencies are mostly the queue of 1,000 requests "
        "released at once (2 shared cores: runs swing by ±30%)."]
    return "\n".join(lines) + "\n"


def _one_accepted(r: dict[str, Any]) -> bool:
    return len(r["verdicts"]) == r["waits"] and all(
        v.get("accepted") == 1 and set(v) <= {"accepted", "duplicate", "already_consumed"}
        for v in r["verdicts"].values())


def record(text: str, path: Path, section: str = SECTION) -> None:
    """Put `text` in RESULTS.md as its own `section`, replacing an earlier one."""
    old = path.read_text() if path.exists() else ""
    pattern = re.compile(re.escape(section) + r".*?(?=\n## |\Z)", re.DOTALL)
    new = pattern.sub(text.rstrip("\n"), old) if section in old else (
        old.rstrip("\n") + "\n\n" + text)
    path.write_text(new if new.endswith("\n") else new + "\n")


def drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--waits", type=int, default=100)
    parser.add_argument("--per-wait", type=int, default=10)
    ns = parser.parse_args()
    results = {}
    load = os.getloadavg()[0]
    schema = f"bench_webhook_{os.getpid()}"
    with tempfile.TemporaryDirectory() as scratch:
        urls = {"SQLite": f"sqlite:///{scratch}/webhook.db"}
        pg = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
        if ns.db in ("postgres", "both"):
            urls["PostgreSQL"] = f"{pg}{'&' if '?' in pg else '?'}schema={schema}"
            os.environ.setdefault("STEAD_KEY_FILE", f"{scratch}/keys")
            stead.keys.ensure_file(os.environ["STEAD_KEY_FILE"])
        if ns.db == "postgres":
            urls.pop("SQLite")
        for db, url in urls.items():
            try:
                r = asyncio.run(measure(url, waits=ns.waits, per_wait=ns.per_wait))
            finally:
                if db == "PostgreSQL":
                    drop_schema(pg, schema)
            print(f"{db}: {r['deliveries']} deliveries in {r['wall_seconds']:.2f} s, "
                  f"p50 {r['p50']:.0f} ms, p99 {r['p99']:.0f} ms, max {r['max']:.0f} ms")
            results[db] = r
    record(_markdown(results, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load),
            ROOT / "bench" / "RESULTS.md")


if __name__ == "__main__":
    main()
