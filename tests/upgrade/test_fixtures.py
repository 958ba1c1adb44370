"""A database written by each earlier release, upgraded by today's code: it
migrates, and each run left there finishes as it should. The fixtures hold a
run in every state (see make_fixture.py): waiting on an approval, completed,
sleeping, paused by the policy, a parent waiting on its child waiting on an
approval, mid-effect (its worker killed after the charge was sent) and in a
queue, never claimed."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import stead
from stead.store import schema_versions
from tests.upgrade import restore
from tests.upgrade.app import LEDGER, app

FIXTURES = restore.every()
# Before schema 17 a pause before an action left no `decision` record, only
# the run's status: a person's resume cannot be told from the pause it
# clears, so the policy pauses the run again and it can only be terminated.
# (Those schemas were development builds; 0.1.0 is schema 28.)
PAUSE_RECORDED_FROM = 17


def test_there_is_a_fixture_of_the_last_releases_and_of_an_old_one() -> None:
    schemas = [f.schema for f in FIXTURES]
    assert len(schemas) >= 4 and schemas[0] <= 13
    assert schemas[-1] == max(v for v in schemas)
    assert schemas[-1] < schema_versions.latest(), "today's schema is not an earlier one"


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda f: f"schema-{f.schema}")
async def test_a_database_of_an_earlier_release_migrates_and_its_runs_finish(
    fixture: restore.Fixture, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STEAD_SECRET", fixture.described["secret"])
    monkeypatch.delenv(stead.keys.KEY_FILE_ENV, raising=False)
    monkeypatch.delenv(schema_versions.ENV, raising=False)
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER, str(ledger))
    if backend == "sqlite":
        await _upgrade_and_finish(fixture, backend, restore.sqlite(fixture, tmp_path / "old.db"),
                                  ledger)
        return
    with restore.postgres(fixture) as url:
        await _upgrade_and_finish(fixture, backend, url, ledger)


async def _upgrade_and_finish(fixture: restore.Fixture, backend: str, url: str,
                              ledger: Path) -> None:
    code = schema_versions.known(backend if backend == "sqlite" else "postgres")
    pending = [m.version for m in code if m.version > fixture.schema]
    held = schema_versions.held(
        [m for m in code if m.version > fixture.schema], schema_versions.OnOpen.ONLINE,
        fresh=False)
    if backend == "postgres" and held:
        # PostgreSQL's default applies only compatible, online migrations on open.
        with pytest.raises(stead.errors.SchemaBehind, match=rf"at schema {fixture.schema} "
                           rf".*{held[0].label} is "):
            await stead.open_store(url)
        report = await stead.store.upgrade(url)
        assert [m.version for m in report.applied] == pending
    # Sleeps come due: business time is an hour ahead (leases keep the database's clock).
    clock = stead.FakeClock(time.time() + 3600)
    store = await stead.open_store(url, clock=clock)
    try:
        assert store.database.versions is not None
        assert store.database.versions.version == code[-1].version
        if backend == "sqlite" or not held:  # this opener migrated
            assert [m.version for m in store.database.versions.applied] == pending
        [charged] = [e["key"] for e in fixture.sent(backend) if e["effect"] == "charge"]
        await _finish(fixture.runs(backend), store, charged,
                      pause_recorded=fixture.schema >= PAUSE_RECORDED_FROM)
    finally:
        await store.close()
    sent = Counter((line["effect"], line["order"]) for line in
                   map(json.loads, ledger.read_text().splitlines()))
    # Each effect the upgraded runs made was sent once; the charge sent before
    # the old worker died was not sent again.
    assert sent == {("notify", "a1"): 1, ("notify", "p1"): 1,
                    **({("refund", "r1"): 1} if fixture.schema >= PAUSE_RECORDED_FROM else {})}
    assert Counter(e["effect"] for e in fixture.sent(backend)) == {"notify": 1, "charge": 1}


async def _finish(runs: dict[str, str], store: stead.Store, key: str, *,
                  pause_recorded: bool) -> None:
    """Run what is runnable, answer what waits for a person, run again: every
    run completes. `key` is the charge the old worker sent before it died."""
    client = stead.Client(store, app)

    async def statuses() -> dict[str, str]:
        return {state: str((await client.get(run_id)).status) for state, run_id in runs.items()}

    await stead.Worker(app, store).run_until_idle()
    assert await statuses() == {
        "completed": "completed", "approval": "waiting", "sleeping": "completed",
        "paused": "paused", "parent": "waiting", "child": "waiting",
        "unknown": "outcome_unknown", "queued": "completed",
    }
    operator = stead.Operator(by="upgrade test", why="approved")
    for state in ("approval", "child"):
        delivered = await client.deliver(runs[state], event_id=f"ok-{state}", kind="approval",
                                         payload={"approved": True}, operator=operator)
        assert isinstance(delivered, stead.Accepted), delivered
    await client.reconcile(runs["unknown"], "charge", happened={"charged": key},
                           by="upgrade test", why="the card was charged")
    await client.resume(runs["paused"], by="upgrade test", why="checked with the customer")
    await stead.Worker(app, store).run_until_idle()
    if not pause_recorded:
        assert (await client.get(runs["paused"])).status == "paused"
        await client.terminate(runs["paused"], by="upgrade test", why="paused again")
        del runs["paused"]
    assert await statuses() == dict.fromkeys(runs, "completed")
    results: dict[str, Any] = {state: await client.result(run_id, timeout=5)
                               for state, run_id in runs.items()}
    assert results["approval"]["approved"] is True and results["approval"]["order"] == "a1"
    assert results["completed"]["order"] == "c1"
    assert results["parent"]["child"]["order"] == "p1"
    assert results["sleeping"] == "woke" and results["queued"] == 42
    assert results["unknown"] == {"charged": key}
    assert results.get("paused", {"refunded": 150}) == {"refunded": 150}
