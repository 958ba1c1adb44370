"""What a backend cannot store, and numbers that mean nothing, are refused at
the door with a typed error, the same on SQLite and PostgreSQL, and nothing
is stored; a write the database refuses for good fails the run instead of
being retried forever."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import stead
from stead import errors
from stead.cli import main
from stead.testing import DelegatingStore
from stead.web import create_app

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
    assert "refused the write for good" in error["message"]
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
    with pytest.raises(errors.StoreRejected, match="refused the write for good"):
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
    assert result.exit_code == 2, result.output
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
    asgi = create_app(app, store=store, token="t" * 32)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://testserver") as http:
        page = await http.get(f"/runs/{run_id}")
    assert page.status_code == 200


# -- the dashboard's queries ------------------------------------------------------------
async def test_dashboard_queries_out_of_range_are_400_and_unstorable_ids_404(
    store: stead.Store,
) -> None:
    asgi = create_app(stead.App("bounds"), store=store, token="t" * 32)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://testserver") as http:
        huge = await http.get("/runs", params={"workflow": f"refund@{2**80}"})
        nul = await http.get("/runs", params={"task_id": NUL})
        bad_utf8 = await http.get("/runs?workflow=a%ED%B3%BF%FF")  # decoded as U+FFFD
        fine = await http.get("/runs", params={"workflow": "refund@2"})
        page = await http.get("/runs/a%00b")
    assert huge.status_code == 400 and "2147483647" in huge.text
    assert nul.status_code == 400 and "NUL" in nul.text
    assert bad_utf8.status_code == 200
    assert fine.status_code == 200
    assert page.status_code == 404
