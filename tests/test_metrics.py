"""stead.metrics on both stores: the gauges a scrape reads from the store, the
counters the step path records, and the probes of `stead worker
--metrics-port` (the process-level and real-Prometheus checks are in
tests/test_metrics_processes.py)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import stead
from stead.metrics.endpoint import Endpoint
from stead.metrics.exposition import Exposition
from tests.helpers import Crash, crash_then_resume


@pytest.fixture
async def exposition() -> AsyncIterator[Exposition]:
    e = Exposition()
    yield e
    e.close()


def samples(text: bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus text, by name and labels."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text.decode())
            for s in family.samples}


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`."""
    return sum(v for (n, ls), v in found.items()
               if n == name and set(labels.items()) <= set(ls))


def _app(ledger: list[str]) -> tuple[stead.App, Any, Any]:
    app = stead.App("metrics")

    def send(op: stead.Operation, crash: bool) -> str:
        ledger.append(op.key)
        if crash:
            raise Crash()  # sent, and the worker died before journaling it
        return "sent"

    @app.workflow()
    async def pay(run: stead.Run, crash: bool) -> str:
        await run.step("look", lambda: 1)
        return str(await run.effect("pay", send, crash))

    @app.workflow()
    async def ask(run: stead.Run) -> str:
        w = await run.wait("approval", token=False, expires_in=600)
        return str(await w)

    return app, pay, ask


async def test_a_scrape_reports_the_store_and_what_the_worker_did(
        fstore: stead.Store, clock: stead.FakeClock, exposition: Exposition,
        backend: str) -> None:
    ledger: list[str] = []
    app, pay, ask = _app(ledger)
    client = stead.Client(fstore, app)
    done = await client.start(pay, False)
    unknown = await client.start(pay, True)
    waiting = await client.start(ask)
    await crash_then_resume(app, fstore, clock)
    assert (await client.get(done.run_id)).status == "completed"
    assert (await client.get(unknown.run_id)).status == "outcome_unknown"
    assert (await client.get(waiting.run_id)).status == "waiting"
    await client.start(pay, False)  # pending: nothing claims it
    clock.advance(120)

    await exposition.fleet.refresh(fstore, grace=60.0)
    text = exposition.render()
    found = samples(text)
    # The gauges, from the store.
    assert value(found, "stead_store_up") == 1
    assert value(found, "stead_runs", workflow="pay", status="outcome_unknown") == 1
    assert value(found, "stead_runs", workflow="ask", status="waiting") == 1
    assert value(found, "stead_runs", status="completed") == 0  # ended runs are not read
    assert value(found, "stead_effects_unknown") == 1
    assert value(found, "stead_effects_unknown_oldest_age_seconds") >= 120
    assert value(found, "stead_queue_runnable", queue="(none)") == 1
    assert value(found, "stead_queue_oldest_age_seconds", queue="(none)") >= 120
    assert value(found, "stead_workflow_runnable", workflow="pay", version="1") == 1
    assert value(found, "stead_runs_stranded", workflow="pay") == 1  # no worker serves it
    assert value(found, "stead_waits_open") == 1
    assert value(found, "stead_waits_expiring") == 1
    # PostgreSQL only: the journal's day partitions (the values: the test below).
    days = [v for (n, _), v in found.items() if n == "stead_journal_days_ahead"]
    assert len(days) == (1 if backend == "postgres" else 0)
    # The counters, from the step path.
    assert value(found, "stead_effects_total", outcome="done") == 1
    assert value(found, "stead_effects_total", outcome="unknown") == 1
    assert value(found, "stead_call_duration_seconds_count", kind="step") == 2
    assert value(found, "stead_call_duration_seconds_count", kind="effect") == 2
    assert value(found, "stead_runs_finished_total", status="completed") == 1
    assert value(found, "stead_runs_finished_total", status="outcome_unknown") == 1
    assert value(found, "stead_resumes_total") == 1  # the crashed run, taken over
    assert value(found, "stead_claim_duration_seconds_count") >= 2
    # No label names a run, a task or a key.
    for run_id in (done.run_id, unknown.run_id, waiting.run_id):
        assert run_id.encode() not in text


async def test_a_scrape_that_cannot_read_the_store_says_so(
        db_url: str, exposition: Exposition) -> None:
    store = await stead.open_store(db_url)
    await store.close()  # every read now fails
    await exposition.fleet.refresh(store, grace=60.0)
    found = samples(exposition.render())
    assert value(found, "stead_store_up") == 0
    assert not [k for k in found if k[0] == "stead_runs"]


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = answer.read()
            code = answer.status
    except urllib.error.HTTPError as exc:
        body, code = exc.read(), exc.code
    try:
        return code, json.loads(body)
    except ValueError:
        return code, body


async def test_the_probes_answer_and_a_wedged_loop_fails_healthz(
        store: stead.Store) -> None:
    endpoint = Endpoint(store, Exposition(), grace=60.0, stall=0.5)
    endpoint.bind("127.0.0.1", 0)
    base = f"http://127.0.0.1:{endpoint.port}"
    async with endpoint.serving():
        assert await asyncio.to_thread(_get, f"{base}/healthz") == (200, {"status": "ok"})
        code, body = await asyncio.to_thread(_get, f"{base}/readyz")
        assert (code, body["status"], body["problems"]) == (200, "ready", [])
        code, text = await asyncio.to_thread(_get, f"{base}/metrics")
        assert code == 200 and b"stead_store_up 1.0" in text
        assert (await asyncio.to_thread(_get, f"{base}/nothing"))[0] == 404

        # The loop is wedged (CPU-bound code on it): the probe, from its own
        # thread, answers that it stalled.
        seen: list[tuple[int, Any]] = []
        probe = threading.Thread(target=lambda: (time.sleep(1.0),
                                                 seen.append(_get(f"{base}/healthz"))))
        probe.start()
        time.sleep(2.0)  # blocks the loop, past the probe's look
        probe.join()
        code, body = seen[0]
        assert code == 503 and body["status"] == "stalled"
        assert "event loop" in body["problems"][0]
        await asyncio.sleep(0.6)  # turning again
        assert (await asyncio.to_thread(_get, f"{base}/healthz"))[0] == 200


async def test_readyz_fails_when_the_store_does_not_answer(db_url: str) -> None:
    store = await stead.open_store(db_url)
    await store.close()
    endpoint = Endpoint(store, Exposition(), grace=60.0)
    endpoint.bind("127.0.0.1", 0)
    async with endpoint.serving():
        code, body = await asyncio.to_thread(_get, f"http://127.0.0.1:{endpoint.port}/readyz")
    assert code == 503 and body["problems"][0].startswith("store:")


async def test_the_dashboard_serves_metrics_without_a_login(store: stead.Store) -> None:
    import httpx

    from stead.web import create_app

    ledger: list[str] = []
    app, pay, _ask = _app(ledger)
    await stead.Client(store, app).start(pay, False)
    asgi = create_app(app, store=store, token="secret-token-for-the-test")
    # Its lifespan ends the exposition it made, as `stead ui` does on exit.
    async with asgi.router.lifespan_context(asgi), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=asgi), base_url="http://127.0.0.1") as http:
        answer = await http.get("/metrics")
        page = await http.get("/runs")
    from stead.metrics import meters

    assert not meters.enabled()
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    found = samples(answer.content)
    assert value(found, "stead_runs", workflow="pay", status="pending") == 1
    assert page.status_code == 401  # the pages still need a login


REFERENCE = Path(__file__).parent.parent / "docs" / "reference" / "metrics.md"


def documented() -> set[str]:
    """The metrics docs/reference/metrics.md lists (first cell of each table row)."""
    return set(re.findall(r"^\| `(stead_[a-z_]+)` \|", REFERENCE.read_text(), re.M))


def exported(text: bytes) -> set[str]:
    """The sample names a scrape holds, less a histogram's bucket, sum and count."""
    names = {s.name for f in text_string_to_metric_families(text.decode()) for s in f.samples}
    return {re.sub(r"_(bucket|sum|count)$", "", n) if n.endswith(("_bucket", "_sum", "_count"))
            and "duration" in n else n for n in names}


# Documented as PostgreSQL's alone: an SQLite store has nothing to report for them.
POSTGRES_ONLY = {"stead_journal_days_ahead"}


async def test_every_metric_is_documented_and_every_documented_one_exported(
        fstore: stead.Store, clock: stead.FakeClock, exposition: Exposition,
        backend: str) -> None:
    from stead.metrics import meters

    ledger: list[str] = []
    app, pay, ask = _app(ledger)
    client = stead.Client(fstore, app)
    await client.start(pay, True)
    await client.start(ask)
    await crash_then_resume(app, fstore, clock)
    await client.start(pay, False)  # runnable, and served by the worker below
    await client.start(ask)  # runnable, and served by none: stranded
    clock.advance(120)
    await fstore.heartbeat("w", [("pay@1", "hosts")], policy_version=None, live_for=60)
    # The counters no run here reaches, each once.
    for cause in meters.Takeover:
        meters.takeover(cause)
    meters.refused()
    meters.store_error(stead.errors.StoreUnavailable("x"))
    meters.store_retry("locked")
    meters.loop_blocked(1.0)
    meters.tokens(type("Usage", (), {"input_tokens": 1, "output_tokens": 1})())
    await exposition.fleet.refresh(fstore, grace=60.0)
    assert exported(exposition.render()) == documented() - (
        set() if backend == "postgres" else POSTGRES_ONLY)


async def test_a_live_model_call_counts_its_tokens_and_a_replayed_one_none(
        fstore: stead.Store, clock: stead.FakeClock, exposition: Exposition) -> None:
    from stead.llm.model import Completion, Usage

    app = stead.App("tokens")
    model = stead.ScriptedModel([Completion(text="hi", model="m", stop_reason="end",
                                            usage=Usage(input_tokens=12, output_tokens=5))])

    @app.workflow()
    async def ask(run: stead.Run) -> str:
        answer = await run.llm("greet", model, [{"role": "user", "content": "hello"}])
        await run.step("after", crash_once)
        return answer.text

    crashed: list[bool] = []

    def crash_once() -> None:
        if not crashed:
            crashed.append(True)
            raise Crash()  # the worker dies after the answer was journaled

    client = stead.Client(fstore, app)
    info = await client.start(ask)
    await crash_then_resume(app, fstore, clock)  # the takeover replays the answer
    assert await client.result(info.run_id) == "hi" and len(model.calls) == 1
    found = samples(exposition.render())
    assert value(found, "stead_model_tokens_total", type="input") == 12
    assert value(found, "stead_model_tokens_total", type="output") == 5
    assert value(found, "stead_call_duration_seconds_count", kind="llm") == 1


async def test_each_lease_a_renewal_extends_is_counted(
        store: stead.Store, exposition: Exposition) -> None:
    app = stead.App("renewals")
    release = asyncio.Event()

    async def hold() -> str:
        await release.wait()
        return "done"

    @app.workflow()
    async def held(run: stead.Run) -> str:
        return str(await run.step("hold", hold))

    client = stead.Client(store, app)
    runs = [await client.start(held) for _ in range(2)]
    # A 0.6 s lease is renewed every 0.2 s: a few renewals of both leases.
    worker = stead.Worker(app, store, stead.WorkerOptions(lease_seconds=0.6))
    working = asyncio.create_task(worker.run_until_idle())
    deadline = time.monotonic() + 30
    while value(samples(exposition.render()), "stead_lease_renewals_total",
                outcome="renewed") < 4:
        assert time.monotonic() < deadline, "no renewals counted"
        await asyncio.sleep(0.05)
    release.set()
    await working
    for info in runs:
        assert await client.result(info.run_id) == "done"
    # Renewals went through: none found its lease lost.
    assert value(samples(exposition.render()), "stead_lease_renewals_total",
                 outcome="lost") == 0


def test_a_metrics_port_in_use_is_one_clear_error(sqlite_url: str) -> None:
    import socket

    from click.testing import CliRunner

    from stead.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        answer = CliRunner().invoke(main, ["--db", sqlite_url, "worker", "tests.metrics_app:app",
                                           "--metrics-port", str(port), "--until-idle"])
    assert answer.exit_code == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in answer.output


def test_the_latency_histogram_counts_a_bound_in_its_own_bucket(
        exposition: Exposition) -> None:
    from stead.metrics import meters

    for seconds in (0.0005, 0.5, 0.5000001, 1000.0):
        meters.call_took("effect", seconds, ok=True)
    found = samples(exposition.render())

    def bucket(le: str) -> float:
        return value(found, "stead_call_duration_seconds_bucket", kind="effect", le=le)

    assert (bucket("0.001"), bucket("0.5"), bucket("1.0"), bucket("300.0"),
            bucket("+Inf")) == (1, 2, 3, 3, 4)
    assert value(found, "stead_call_duration_seconds_count", kind="effect") == 4
    assert value(found, "stead_call_duration_seconds_sum", kind="effect") == pytest.approx(
        1001.0005001)


async def test_the_days_gauge_says_when_no_one_makes_the_journal_partitions(
        pg_url: str, exposition: Exposition) -> None:
    """Before any worker (or when every worker fails to make them), today's
    partition is missing: -1, which the alert SteadJournalDaysNotMade reads.
    Days made far ahead past a missing one do not count."""
    clock = stead.FakeClock()
    clock.t = 1_900_000_000.0  # a day no test made partitions for
    store = await stead.open_store(pg_url, clock=clock, lease_clock=clock)
    try:
        await exposition.fleet.refresh(store, grace=60.0)
        assert value(samples(exposition.render()), "stead_journal_days_ahead") == -1
        await store.add_days(clock.now(), ahead=0)
        await exposition.fleet.refresh(store, grace=60.0)
        assert value(samples(exposition.render()), "stead_journal_days_ahead") == 0
        await store.add_days(clock.now() + 3 * 86400.0)  # days 3 to 5, not 1 and 2
        await exposition.fleet.refresh(store, grace=60.0)
        assert value(samples(exposition.render()), "stead_journal_days_ahead") == 0
        await store.add_days(clock.now())
        await exposition.fleet.refresh(store, grace=60.0)
        assert value(samples(exposition.render()), "stead_journal_days_ahead") == 5
    finally:
        await store.close()
