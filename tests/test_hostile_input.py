"""Hostile or careless input: oversized events and results, events for runs
that do not exist, guessed tokens, control characters in ids, empty task ids."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import stead
from stead import errors
from stead.cli import common, main
from tests import helpers

_approval_app = helpers.approval_app
_waiting = helpers.waiting_for_approval


# -- event sizes --------------------------------------------------------------------
async def test_an_event_over_the_cap_is_refused_and_stores_nothing(store: stead.Store) -> None:
    client, run_id, wait_id, token = await _waiting(store)
    huge = {"note": "x" * 1_000_000}
    with pytest.raises(errors.EventTooLarge, match="over the limit of 256 KB"):
        await client.deliver(run_id, event_id="e-huge", wait_id=wait_id, payload=huge,
                             bind={"order_id": "o-1"}, token=token)
    with pytest.raises(stead.InvalidInput):  # to unknown runs alike
        await client.deliver("no-such-run", event_id="e-huge", kind="approval", payload=huge)
    assert await client.events(run_id) == []
    assert await store.list_events("no-such-run") == []

    # The cap is the client's to set.
    small = stead.Client(store, max_event_bytes=100)
    with pytest.raises(errors.EventTooLarge, match="over the limit of 100 bytes"):
        await small.deliver(run_id, event_id="e-2", wait_id=wait_id, payload={"n": "y" * 200},
                            token=token)
    accepted = await client.deliver(run_id, event_id="e-ok", wait_id=wait_id,
                                    payload={"note": "y" * 200_000},
                                    bind={"order_id": "o-1"}, token=token)
    assert isinstance(accepted, stead.Accepted)


async def test_long_ids_are_refused(store: stead.Store) -> None:
    client = stead.Client(store)
    with pytest.raises(stead.InvalidInput, match="event_id is 1000 characters"):
        await client.deliver("r", event_id="e" * 1000, kind="approval")


@pytest.mark.sqlite_only
async def test_events_for_unknown_runs_keep_only_a_digest(db_url: str, tmp_path: Path) -> None:
    store = await stead.open_store(db_url)
    client = stead.Client(store)
    payload = {"blob": "z" * 200_000}
    try:
        for i in range(20):
            verdict = await client.deliver(f"random-{i}", event_id=f"e-{i}", kind="approval",
                                           payload=payload)
            assert isinstance(verdict, stead.Rejected) and verdict.reason == "unknown_run"
        [event] = await store.list_events("random-3")
    finally:
        await store.close()
    kept = json.loads(event.payload)
    text = json.dumps(payload, separators=(",", ":"))
    assert kept["bytes"] == len(text) and len(kept["sha256"]) == 64
    assert kept["head"] == text[:200] and len(event.payload) < 600
    # 20 events of 200 KB each: the database holds a few hundred bytes of each.
    with sqlite3.connect(tmp_path / "stead.db") as conn:
        [(stored,)] = conn.execute("SELECT sum(length(payload) + length(bind)) FROM events")
    assert stored < 20 * 600


async def test_bad_token_events_keep_a_digest_and_small_ones_stay_readable(
    store: stead.Store,
) -> None:
    client, run_id, wait_id, _token = await _waiting(store)
    await client.deliver(run_id, event_id="e-big", wait_id=wait_id, payload={"a": "b" * 5000},
                         bind={"order_id": "o-1"}, token="stk_guess")
    await client.deliver(run_id, event_id="e-small", wait_id=wait_id, payload={"a": 1},
                         token="stk_guess")
    big, small = await client.events(run_id)
    assert json.loads(big.payload)["bytes"] > 5000 and len(big.payload) < 600
    assert json.loads(small.payload) == {"a": 1}


# -- bad tokens lock the wait -------------------------------------------------------
async def test_repeated_bad_tokens_lock_the_wait_until_unlocked(store: stead.Store) -> None:
    client, run_id, wait_id, token = await _waiting(store)
    bind = {"order_id": "o-1"}
    for i in range(1, 6):
        verdict = await client.deliver(run_id, event_id=f"guess-{i}", wait_id=wait_id,
                                       bind=bind, token=f"stk_guess{i}")
        assert isinstance(verdict, stead.Rejected) and verdict.reason == "bad_token"
        assert verdict.detail.startswith(f"bad token {i} of 5")
    [wait] = await client.waits(run_id=run_id)
    assert wait.bad_tokens == 5 and wait.locked_at is not None

    # The 6th attempt, with the right token, is refused: the wait is locked.
    sixth = await client.deliver(run_id, event_id="right", wait_id=wait_id, bind=bind,
                                 token=token)
    assert isinstance(sixth, stead.Rejected) and sixth.reason == "wait_locked"
    assert f"stead waits unlock {wait_id}" in sixth.detail

    unlocked = await client.unlock_wait(wait_id)
    assert unlocked.bad_tokens == 0 and unlocked.locked_at is None
    again = await client.deliver(run_id, event_id="right", wait_id=wait_id, bind=bind,
                                 token=token)
    assert isinstance(again, stead.Accepted)


async def test_the_lock_threshold_is_the_clients_and_revoking_a_locked_wait_works(
    store: stead.Store,
) -> None:
    client, run_id, wait_id, _token = await _waiting(store)
    strict = stead.Client(store, lock_wait_after=1)
    verdict = await strict.deliver(run_id, event_id="g", wait_id=wait_id, token="stk_x")
    assert isinstance(verdict, stead.Rejected) and "now locked" in verdict.detail
    [wait] = await client.waits(run_id=run_id)
    assert wait.locked_at is not None
    await client.revoke_wait(wait_id)
    [wait] = await client.waits(run_id=run_id, state=None)
    assert wait.state == "revoked"


def test_waits_ls_shows_a_locked_wait_and_waits_unlock_lifts_it(sqlite_url: str) -> None:
    async def lock() -> tuple[str, str]:
        store = await stead.open_store(sqlite_url)
        try:
            _client, run_id, wait_id, _ = await _waiting(store)
            await stead.Client(store, lock_wait_after=1).deliver(
                run_id, event_id="g", wait_id=wait_id, token="stk_x")
            return run_id, wait_id
        finally:
            await store.close()

    _run_id, wait_id = asyncio.run(lock())
    runner = CliRunner()
    listed = runner.invoke(main, ["--db", sqlite_url, "waits", "ls"])
    assert f"LOCKED after 1 bad tokens (stead waits unlock {wait_id})" in listed.output
    unlocked = runner.invoke(main, ["--db", sqlite_url, "waits", "unlock", wait_id])
    assert unlocked.exit_code == 0 and "unlocked wait" in unlocked.output
    assert "LOCKED" not in runner.invoke(main, ["--db", sqlite_url, "waits", "ls"]).output


# -- stead approve of a run that does not exist ---------------------------------------
def test_approve_for_an_unknown_run_says_so_and_stores_nothing(sqlite_url: str) -> None:
    asyncio.run(_opened_database(sqlite_url))
    out = CliRunner().invoke(main, ["--db", sqlite_url, "approve", "no-such-run",
                                    "--kind", "approval", "--token", "stk_x"])
    assert out.exit_code == 1
    assert "no run 'no-such-run'" in out.output and "events ls" not in out.output

    async def events() -> list[stead.records.EventRow]:
        store = await stead.open_store(sqlite_url)
        try:
            return await store.list_events("no-such-run")
        finally:
            await store.close()

    assert asyncio.run(events()) == []


async def _opened_database(url: str) -> None:
    await (await stead.open_store(url)).close()


# -- result sizes ---------------------------------------------------------------------
async def test_a_step_result_over_the_cap_raises_a_typed_error_naming_the_step(
    store: stead.Store,
) -> None:
    app = stead.App("big")

    @app.workflow()
    async def bulky(run: stead.Run) -> str:
        try:
            await run.step("fetch_everything", lambda: "x" * 5000)
        except stead.SerializationError as exc:
            return f"{type(exc).__name__}: {exc}"
        return "stored"

    client = stead.Client(store, app)
    run_id = (await client.start("bulky")).run_id
    await stead.Worker(app, store, stead.WorkerOptions(max_result_bytes=1000)).run_until_idle()
    result = await client.result(run_id)
    assert result.startswith("ResultTooLarge: the result of step 'fetch_everything' is 5 KB")
    assert "over the limit of 1000 bytes" in result
    assert [r.name for r in await client.journal(run_id)] == []  # nothing journaled


async def test_an_effect_result_over_the_cap_names_the_effect(store: stead.Store) -> None:
    app = stead.App("big")

    @app.workflow()
    async def bulky(run: stead.Run) -> Any:
        return await run.effect("export", lambda op: ["row"] * 1000, idempotent=True)

    client = stead.Client(store, app)
    run_id = (await client.start("bulky")).run_id
    await stead.Worker(app, store, stead.WorkerOptions(max_result_bytes=500)).run_until_idle()
    info = await client.get(run_id)
    assert info.error is not None
    assert "the result of effect 'export'" in info.error["message"]
    assert "over the limit of 500 bytes" in info.error["message"]


# -- what reaches the terminal ----------------------------------------------------------
def test_safe_escapes_control_characters_and_bidi_overrides() -> None:
    assert common.safe("order-1") == "order-1"
    assert common.safe("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert common.safe("x\ny\rz\x07") == "x\\ny\\rz\\x07"
    assert common.safe("abc\u202edef") == "abc\\u202edef"
    assert common.safe_lines("one\x1b[2J\ntwo") == "one\\x1b[2J\ntwo"
    assert common.safe("café ✓") == "café ✓"


APP_SOURCE = '''
import stead

app = stead.App("escape")


@app.workflow()
async def hello(run):
    return "hi"
'''


@pytest.fixture
def app_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    import sys
    import uuid

    name = f"escapeapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP_SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return f"{name}:app"


def test_a_task_id_that_clears_the_screen_is_printed_escaped(
    app_spec: str, sqlite_url: str
) -> None:
    runner = CliRunner()
    task = "t\x1b[2J\x1b[H\nforged"
    started = runner.invoke(main, ["--db", sqlite_url, "start", app_spec, "hello",
                                   "--task-id", task])
    assert started.exit_code == 0, started.output
    assert "\x1b" not in started.output and "t\\x1b[2J\\x1b[H\\nforged" in started.output
    run_id = started.output.split()[2]
    for args in (["runs", "ls"], ["runs", "show", run_id]):
        out = runner.invoke(main, ["--db", sqlite_url, *args])
        assert out.exit_code == 0, out.output
        assert "\x1b" not in out.output and "t\\x1b[2J\\x1b[H\\nforged" in out.output
        assert "\nforged" not in out.output
    shown = runner.invoke(main, ["--db", sqlite_url, "runs", "show", run_id, "--json"])
    assert json.loads(shown.output)["run"]["task_id"] == task  # JSON keeps it exact


def test_an_unknown_run_id_with_escapes_is_echoed_escaped(sqlite_url: str) -> None:
    asyncio.run(_opened_database(sqlite_url))
    out = CliRunner().invoke(main, ["--db", sqlite_url, "runs", "cancel", "r\x1b[2J"])
    assert out.exit_code == 1 and "\x1b" not in out.output


# -- empty task ids ---------------------------------------------------------------------
async def test_an_empty_task_id_is_refused_at_start(store: stead.Store) -> None:
    app = _approval_app()
    client = stead.Client(store, app)
    for task in ("", "   "):
        with pytest.raises(stead.InvalidInput, match="is empty"):
            await client.start("confirm", "o-1", task_id=task)
    assert await client.list_runs() == []


def test_the_cli_refuses_an_empty_task_id(app_spec: str, sqlite_url: str) -> None:
    out = CliRunner().invoke(main, ["--db", sqlite_url, "start", app_spec, "hello",
                                    "--task-id", ""])
    assert out.exit_code == 1 and "'--task-id': is empty" in out.output
