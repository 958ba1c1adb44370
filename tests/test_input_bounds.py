"""What a backend cannot store, and numbers that mean nothing, are refused at
the door with a typed error, the same on SQLite and PostgreSQL, and nothing
is stored; a write the database refuses for good fails the run instead of
being retried forever."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stead
from stead import bounds, errors
from stead.cli import main
from stead.testing import DelegatingStore
from stead.web import create_app
from tests import stress

NUL = "a\x00b"
SURROGATE = "a\ud800b"


def _naming_app(name: str, calls: list[str]) -> stead.App:
    app = stead.App("bounds")

    def work() -> str:
        calls.append(name)
        return "done"

    @app.workflow()
    async def named(run: stead.Run) -> Any:
        return await run.step(name, work)

    return app


@pytest.mark.parametrize("name", [NUL, SURROGATE], ids=["nul", "surrogate"])
async def test_a_step_name_no_store_keeps_fails_the_run_once_with_a_typed_error(
    store: stead.Store, name: str,
) -> None:
    calls: list[str] = []
    app = _naming_app(name, calls)
    run_id = (await stead.Client(store, app).start("named")).run_id
    worker = stead.Worker(app, store, stead.WorkerOptions(store_backoff=0.01))
    done = await asyncio.wait_for(worker.run_until_done([run_id], timeout=60), 120)
    assert done, "the run was retried instead of failing"
    info = await store.get_run(run_id)
    assert info.status == stead.records.RunStatus.FAILED
    error = json.loads(info.error or "{}")
    assert error["type"] == "InvalidValue"
    assert "step name" in error["message"]
    assert calls == []  # refused before the step ran


class _Duplicating(DelegatingStore):
    """Sends each journal write with its last record twice: the database
    refuses it (the same seq), however often it is tried."""

    async def append(self, fence: stead.records.Fence, records: Sequence[stead.Record],
                     resume: stead.ResumeRecord | None = None) -> None:
        doubled = [*records, records[-1]] if records else records
        await self.inner.append(fence, doubled, resume)


async def test_a_write_the_database_refuses_for_good_fails_the_run_instead_of_looping(
    store: stead.Store,
) -> None:
    calls: list[str] = []
    app = _naming_app("fine", calls)
    run_id = (await stead.Client(store, app).start("named")).run_id
    worker = stead.Worker(app, _Duplicating(store), stead.WorkerOptions(store_backoff=0.01))
    done = await asyncio.wait_for(worker.run_until_done([run_id], timeout=60), 120)
    assert done, "a write refused for good was retried as transient"
    info = await store.get_run(run_id)
    assert info.status == stead.records.RunStatus.FAILED
    error = json.loads(info.error or "{}")
    assert error["type"] == "StoreRejected"
    assert "refused it for good" in error["message"]
    assert calls == ["fine"]  # once: never re-run


async def test_postgres_refusing_a_nul_is_store_rejected(store: stead.Store,
                                                         backend: str) -> None:
    """Below the door (the store's own interface), PostgreSQL's refusal of a
    NUL in text is told apart from a lost connection."""
    if backend != "postgres":
        pytest.skip("SQLite keeps a NUL in text: the door refuses it for both")
    app = _naming_app("fine", [])
    run_id = (await stead.Client(store, app).start("named")).run_id
    [row] = await store.claim("w", ["named@1"], 30.0, 1)
    fence = stead.records.Fence(run_id, row.epoch, "w")
    record = stead.Record(seq=1, addr="0", attempt=1, kind=stead.records.RecordKind.STEP,
                          name=NUL, digest="", status=stead.records.RecordStatus.OK,
                          payload="1", epoch=row.epoch, at=0.0)
    with pytest.raises(errors.StoreRejected, match="refused it for good"):
        await store.append(fence, [record])
    assert await store.load_journal(run_id) == []


# -- the command line -----------------------------------------------------------------
@pytest.mark.parametrize("args", [
    ["worker", "tests.web_app:app", "--lease", "nan"],
    ["worker", "tests.web_app:app", "--heartbeat", "inf"],
    ["worker", "tests.web_app:app", "--poll", "-1"],
    ["worker", "tests.web_app:app", "--timeout", "1e300", "--until-done"],
    ["grants", "renew", "R", "t", "--expires-in", "nan", "--by", "a", "--why", "b"],
    ["start", "tests.web_app:app", "approval", "--version", str(2**80)],
    ["start", "tests.web_app:app", "approval", "--priority", str(2**80)],
    ["runs", "ls", "--limit", str(2**80)],
    ["ui", "tests.web_app:app", "--poll", "nan"],
])
def test_the_cli_refuses_numbers_out_of_range_as_a_usage_error(
    args: list[str], sqlite_url: str,
) -> None:
    result = CliRunner().invoke(main, ["--db", sqlite_url, *args])
    assert result.exit_code == 1, result.output
    assert "Invalid value for" in result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)


# -- a time stored before the door checked it -------------------------------------------
@pytest.mark.sqlite_only
async def test_a_huge_stored_expiry_is_shown_in_words_on_the_cli_and_the_dashboard(
    store: stead.Store, db_url: str,
) -> None:
    app = stead.App("bounds")

    @app.workflow()
    async def confirm(run: stead.Run) -> Any:
        return await (await run.wait("approval", expires_in=60))

    run_id = (await stead.Client(store, app).start("confirm")).run_id
    await stead.Worker(app, store).run_until_idle()
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as raw:
        raw.execute("UPDATE waits SET expires_at = 1e300")
    listed = await asyncio.to_thread(CliRunner().invoke, main, ["--db", db_url, "waits", "ls"])
    assert listed.exit_code == 0, listed.output
    assert "beyond year 9999" in listed.output
    asgi = create_app(app, store=store, token="t" * 32, public=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://127.0.0.1:8484") as http:
        page = await http.get(f"/runs/{run_id}")
    assert page.status_code == 200


# -- the dashboard's queries ------------------------------------------------------------
async def test_dashboard_queries_out_of_range_are_400_and_unstorable_ids_404(
    store: stead.Store,
) -> None:
    asgi = create_app(stead.App("bounds"), store=store, token="t" * 32, public=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://127.0.0.1:8484") as http:
        huge = await http.get("/runs", params={"workflow": f"refund@{2**80}"})
        nul = await http.get("/runs", params={"task_id": NUL})
        bad_utf8 = await http.get("/runs?workflow=a%ED%B3%BF%FF")  # decoded as U+FFFD
        fine = await http.get("/runs", params={"workflow": "refund@2"})
        page = await http.get("/runs/a%00b")
    assert huge.status_code == 400 and str(2**80) in huge.text
    assert nul.status_code == 400 and "control character" in nul.text
    assert bad_utf8.status_code == 200
    assert fine.status_code == 200
    assert page.status_code == 404


# -- hostile values at every entry point, on both stores ---------------------------------
BAD_NUMBERS = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -1, -1e-9, 1e300, 2**80, -(2**80)]),
    st.floats(min_value=bounds.MAX_EXACT * 2.0, allow_infinity=True),
    st.floats(max_value=-1e-12, allow_infinity=True),
    st.integers(min_value=bounds.MAX_EXACT + 1),
)
BAD_TEXT = st.builds(lambda a, bad, b: a + bad + b, st.text(max_size=4),
                     st.sampled_from(["\x00", "\ud800", "\udbff", "\udc00", "\udfff"]),
                     st.text(max_size=4))
# What a probe workflow does with a hostile value, by key (its input: a
# value such as NaN cannot be a workflow's JSON input).
_PROBES: dict[str, tuple[str, Any]] = {}


def _probe_app() -> stead.App:
    app = stead.App("probes")

    @app.workflow()
    async def probe(run: stead.Run, key: str) -> str:
        place, value = _PROBES[key]
        calls = {
            "sleep": lambda: run.sleep(value),
            "wait expires_in": lambda: run.wait("k", expires_in=value),
            "step timeout": lambda: run.step("s", lambda: 1, timeout=value),
            "effect cost": lambda: run.effect("e", lambda op: 1, cost=value),
            "effect timeout": lambda: run.effect("e", lambda op: 1, timeout=value),
            "child deadline": lambda: run.child("probe", key, deadline=value),
            "step name": lambda: run.step(value, lambda: 1),
            "wait kind": lambda: run.wait(value),
            "effect key": lambda: run.effect("e", lambda op: 1, key=value),
            "step result": lambda: run.step("s", lambda: value),
        }
        try:
            await calls[place]()
        except stead.SteadError as exc:
            return type(exc).__name__
        return "accepted"

    return app


RUN_NUMBERS = ["sleep", "wait expires_in", "step timeout", "effect cost", "effect timeout",
               "child deadline"]
RUN_TEXTS = ["step name", "wait kind", "effect key"]


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(probe=st.one_of(st.tuples(st.sampled_from(RUN_NUMBERS), BAD_NUMBERS),
                       st.tuples(st.sampled_from(RUN_TEXTS), BAD_TEXT),
                       st.tuples(st.just("step result"),
                                 BAD_TEXT.filter(lambda t: "\x00" not in t))))
def test_a_run_call_given_a_hostile_value_raises_a_typed_error_and_journals_nothing(
    db_url: str, probe: tuple[str, Any],
) -> None:
    async def scenario() -> None:
        store = await stead.open_store(db_url)
        try:
            key = uuid.uuid4().hex
            _PROBES[key] = probe
            app = _probe_app()
            run_id = (await stead.Client(store, app).start("probe", key)).run_id
            await stead.Worker(app, store).run_until_done([run_id], timeout=60)
            said = await stead.Client(store, app).result(run_id)
            assert said in ("InvalidValue", "SerializationError"), (probe, said)
            journal = await store.load_journal(run_id)
            assert [r.kind for r in journal if r.kind != "trace"] == [], journal
            assert await store.list_waits(run_id=run_id) == []
        finally:
            await store.close()

    asyncio.run(scenario())


def _client_call(place: str, value: Any) -> Callable[[stead.Client], Awaitable[Any]]:
    intent = functools.partial(stead.Intent, goal="g")
    calls: dict[str, Callable[[stead.Client], Awaitable[Any]]] = {
        "start deadline": lambda c: c.start("takes", 1, deadline=value),
        "start version": lambda c: c.start("takes", 1, version=value),
        "start budget": lambda c: c.start("takes", 1, intent=intent(
            budget=stead.Budget(spend=value))),
        "start grant expires_in": lambda c: c.start("takes", 1, intent=intent(
            grants=[stead.Grant("t", expires_in=value)])),
        "start grant expires_at": lambda c: c.start("takes", 1, intent=intent(
            grants=[stead.Grant("t", expires_at=value)])),
        "start task_id": lambda c: c.start("takes", 1, task_id=value),
        "start workflow": lambda c: c.start(value, 1, version=1),
        "start argument": lambda c: c.start("takes", value),
        "deliver event_id": lambda c: c.deliver("r", event_id=value, kind="k"),
        "deliver kind": lambda c: c.deliver("r", event_id="e", kind=value),
        "deliver run_id": lambda c: c.deliver(value, event_id="e", kind="k"),
        "deliver payload": lambda c: c.deliver("r", event_id="e", kind="k",
                                               payload={"note": value}),
        "deliver operator": lambda c: c.deliver("r", event_id="e", kind="k",
                                                operator=stead.Operator(value, "why")),
        "terminate by": lambda c: c.terminate("r", by=value, why="why"),
        "list limit": lambda c: c.list_runs(limit=value),
        "result timeout": lambda c: c.result("r", timeout=value),
        "fork at": lambda c: c.fork("r", at=value),
        "migrate to": lambda c: c.migrate("r", to=value),
    }

    async def number_call(_c: stead.Client) -> Any:
        return {"retry": lambda: stead.Retry(backoff=value),
                "worker lease": lambda: stead.WorkerOptions(lease_seconds=value),
                "queue rate": lambda: stead.App("q").queue("q", rate=(1, value)),
                "queue concurrency": lambda: stead.App("q").queue("q", concurrency=value),
                }[place]()

    return calls.get(place, number_call)


CLIENT_NUMBERS = ["start deadline", "start version", "start budget", "start grant expires_in",
                  "start grant expires_at", "retry", "worker lease", "list limit",
                  "result timeout", "fork at", "migrate to", "queue rate", "queue concurrency"]
CLIENT_TEXTS = ["start task_id", "start workflow", "deliver event_id", "deliver kind",
                "deliver run_id", "deliver operator", "terminate by"]


@settings(max_examples=stress.examples(40), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(call=st.one_of(st.tuples(st.sampled_from(CLIENT_NUMBERS), BAD_NUMBERS),
                      st.tuples(st.sampled_from(CLIENT_TEXTS), BAD_TEXT),
                      st.tuples(st.sampled_from(["start argument", "deliver payload"]),
                                BAD_TEXT.filter(lambda t: "\x00" not in t))))
def test_the_client_given_a_hostile_value_raises_a_typed_error_and_stores_nothing(
    db_url: str, call: tuple[str, Any],
) -> None:
    async def scenario() -> None:
        store = await stead.open_store(db_url)
        try:
            app = stead.App("client-probes")

            @app.workflow()
            async def takes(run: stead.Run, n: Any) -> Any:
                return n

            client = stead.Client(store, app)
            with pytest.raises(errors.SteadError):
                await _client_call(*call)(client)
            assert sum((await client.count_runs()).values()) == 0
            assert await store.list_events("r") == []
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_nul_in_a_payload_is_kept_losslessly(tmp_path: Any) -> None:
    """Payloads are JSON with the NUL escaped: both stores keep it as text."""
    text = stead.codec.dumps({"a\x00": "b\x00c"}, what="a value")
    assert "\x00" not in text and stead.codec.loads(text) == {"a\x00": "b\x00c"}
    with pytest.raises(errors.SerializationError, match="lone surrogate"):
        stead.codec.dumps(["\ud800"], what="a value")
    assert stead.codec.loads(stead.codec.dumps("\U0001f600\\ud800", what="v")) == \
        "\U0001f600\\ud800"  # a pair, and an escaped backslash before "ud800": fine


async def test_a_nul_in_results_and_events_comes_back_as_it_was_on_both_stores(
    store: stead.Store,
) -> None:
    app = stead.App("bounds")

    @app.workflow()
    async def keeps(run: stead.Run) -> Any:
        made = await run.step("make", lambda: "x\x00y")
        w = await run.wait("note", bind={"k\x00": "v\x00"}, token=False)
        event = await w
        await run.state.update({"s\x00": made}, expect_version=None)
        return [made, event, (await run.state.get()).data]

    client = stead.Client(store, app)
    run_id = (await client.start("keeps", task_id="t-1")).run_id
    worker = stead.Worker(app, store)
    await worker.run_until_idle()
    delivered = await client.deliver(run_id, event_id="e-1", kind="note",
                                     payload={"p": "q\x00r"}, bind={"k\x00": "v\x00"})
    assert isinstance(delivered, stead.Accepted), delivered
    await worker.run_until_idle()
    assert await client.result(run_id, timeout=30) == [
        "x\x00y", {"p": "q\x00r"}, {"s\x00": "x\x00y"}]


async def test_a_worker_process_fails_a_nul_step_name_once_and_exits(
    db_url: str, tmp_path: Path,
) -> None:
    """The real `stead worker --until-done`: before the check, on PostgreSQL,
    the step ran and was refused every couple of seconds until the timeout."""
    from tests.workers import bounds_app

    store = await stead.open_store(db_url)
    try:
        run_id = (await stead.Client(store, bounds_app.app).start("nul_step")).run_id
    finally:
        await store.close()
    calls = tmp_path / "calls.log"
    env = {**os.environ, "STEAD_TEST_CALLS": str(calls),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = await asyncio.to_thread(subprocess.run, [
        sys.executable, "-m", "stead", "--db", db_url, "worker",
        "tests.workers.bounds_app:app", "--until-done", run_id, "--timeout", "60",
        "--poll", "0.05"], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    store = await stead.open_store(db_url)
    try:
        info = await store.get_run(run_id)
    finally:
        await store.close()
    assert info.status == stead.records.RunStatus.FAILED
    assert json.loads(info.error or "{}")["type"] == "InvalidValue"
    assert not calls.exists()  # refused before the step ran, never re-run


async def test_an_id_from_argv_that_is_not_utf8_is_a_one_line_error(
    store: stead.Store, db_url: str,
) -> None:
    """A shell passes bytes that are not UTF-8 as lone surrogates (Python's
    surrogateescape): reading by such an id is StoreRejected, never a traceback."""
    with pytest.raises(errors.StoreRejected, match="trying again cannot succeed"):
        await store.get_run("\udcff")
    shown = await asyncio.to_thread(CliRunner().invoke, main,
                                    ["--db", db_url, "runs", "show", "\udcff"])
    assert shown.exit_code == 1, shown.output
    assert "Traceback" not in shown.output and "cannot" in shown.output


@pytest.mark.parametrize("grace", [math.nan, math.inf, -1.0, 1e300])
def test_a_schedule_grace_out_of_range_is_an_invalid_schedule(grace: float) -> None:
    with pytest.raises(stead.InvalidSchedule, match="grace"):
        stead.App("s").schedule("*/5 * * * *", grace=grace)


def test_a_schedule_name_no_store_keeps_is_an_invalid_schedule() -> None:
    async def tick(run: stead.Run, at: str) -> None:
        return None

    with pytest.raises(stead.InvalidSchedule, match="NUL"):
        stead.App("s").schedule("*/5 * * * *", name=NUL)(tick)
