"""Migrations refused, in-process on both stores: nothing changes and the
message says why. (The three deploys with real workers are in
tests/test_deploys.py; the app is tests/deploy_app.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import stead
from tests import deploy_app


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "notify.log"
    monkeypatch.setenv("DEPLOY_LEDGER", str(path))
    return path


async def _waiting(store: stead.Store) -> str:
    info = await stead.Client(store, deploy_app.v1).start("refund", "123", version=1)
    await stead.Worker(deploy_app.v1, store).run_until_idle()
    return info.run_id


async def _approve(store: stead.Store, run_id: str) -> None:
    await stead.Client(store).deliver(run_id, event_id="ok", kind="approval",
                                      payload={"approved": True})


async def test_a_migration_that_would_lose_an_effect_stops_the_run_at_the_gate(
    store: stead.Store,
) -> None:
    run_id = await _waiting(store)
    client = stead.Client(store, deploy_app.v2_lossy)
    before = await client.journal(run_id)
    await _approve(store, run_id)
    await stead.Worker(deploy_app.v2_lossy, store).run_until_idle()
    info = await client.get(run_id)
    assert info.status == "incompatible_checkpoint" and info.version == 1
    assert info.error is not None and info.error["type"] == "MigrationRefused"
    assert "would lose 2 record(s) of effects" in info.error["message"]
    assert "'notify'" in info.error["message"]
    assert await client.journal(run_id) == before
    assert await client.migrations(run_id) == []
    decision = (await client.resumes(run_id))[-1].details.intent
    assert decision is not None and decision["decision"]["decision"] == (
        "stopped: incompatible_checkpoint")
    # A fitting migration deployed: retried, the run is migrated and finishes.
    await client.retry(run_id)
    await stead.Worker(deploy_app.v2_migrating, store).run_until_idle()
    done = await client.get(run_id)
    assert done.status == "completed" and done.result["currency"] == "EUR"


async def test_a_migration_whose_journal_the_new_code_cannot_replay_is_not_applied(
    store: stead.Store,
) -> None:
    run_id = await _waiting(store)
    app = stead.App("shop")
    app.workflow(name="refund", version=2)(deploy_app.v2.get("refund", 2).fn)

    @app.migration("refund", from_version=1, to_version=2)
    def forgot_the_rename(old: stead.MigrationView) -> stead.Migrated:
        return stead.Migrated(args=[*old.args, "EUR"])

    client = stead.Client(store, app)
    report = await client.migrate(run_id, to=2, by="alice")
    assert not report.ok and report.applied == ()
    finding = report.replay.finding
    assert finding is not None and finding.expected == "step 'check'"
    assert finding.actual == "step 'check_eligibility'" and finding.seq == 0
    assert (await client.get(run_id)).version == 1


@pytest.mark.parametrize(("made", "why"), [
    (lambda old: stead.Migrated(args=list(old.args)), "does not fit refund@2"),
    (lambda old: 1 / 0, "raised on run .*ZeroDivisionError"),
    (lambda old: {"args": []}, "returned dict, not a stead.Migrated"),
])
async def test_a_migration_that_is_wrong_is_refused_naming_it(
    store: stead.Store, made: Any, why: str,
) -> None:
    run_id = await _waiting(store)
    app = stead.App("shop")
    app.workflow(name="refund", version=2)(deploy_app.v2.get("refund", 2).fn)
    app.migration("refund", from_version=1, to_version=2)(made)
    client = stead.Client(store, app)
    with pytest.raises(stead.MigrationRefused, match=why):
        await client.migrate(run_id, to=2, by="alice", dry_run=True)
    with pytest.raises(stead.MigrationRefused, match="no migration from refund@2 toward "
                                                     "version 3"):
        await client.migrate(run_id, to=3, by="alice")


async def test_a_run_held_by_a_worker_is_not_migrated(store: stead.Store) -> None:
    run_id = await _waiting(store)
    await _approve(store, run_id)
    [claimed] = await store.claim("busy-worker", ["refund@1"], 30.0, 1)
    assert claimed.run_id == run_id
    client = stead.Client(store, deploy_app.v2_migrating)
    with pytest.raises(stead.MigrationRefused, match="held by worker busy-worker"):
        await client.migrate(run_id, to=2, by="alice")
    assert (await client.get(run_id)).version == 1


async def test_no_rollback_once_the_run_journaled_after_its_migration(
    store: stead.Store,
) -> None:
    app = stead.App("shop")
    async def two_waits(run: stead.Run) -> int:
        await (await run.wait("first", token=False))
        await (await run.wait("second", token=False))
        return run.version

    for version in (1, 2):
        app.workflow(name="two_waits", version=version)(two_waits)

    @app.migration("two_waits", from_version=1, to_version=2)
    def same(old: stead.MigrationView) -> stead.Migrated:
        return stead.Migrated()

    client = stead.Client(store, app)
    info = await client.start("two_waits", version=1)
    await stead.Worker(app, store).run_until_idle()
    assert (await client.migrate(info.run_id, to=2, by="alice")).applied
    await client.deliver(info.run_id, event_id="1", kind="first", payload={})
    await stead.Worker(app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == "waiting"
    with pytest.raises(stead.MigrationRefused, match=r"went on after its migration .*2 "
                                                     r"record\(s\) journaled since"):
        await client.rollback(info.run_id, by="alice")
    assert (await client.get(info.run_id)).version == 2
    with pytest.raises(stead.MigrationRefused, match="no migration to roll back"):
        await client.rollback(await _waiting(store), by="alice")


async def test_an_export_that_is_not_one_is_refused_naming_it() -> None:
    with pytest.raises(stead.InvalidInput, match=r"run\.json: it is not a stead run export"):
        stead.StoredRun.loads('{"run": {}}', source="run.json")
    with pytest.raises(stead.InvalidInput, match=r"run\.json is not JSON"):
        stead.StoredRun.loads("{", source="run.json")
