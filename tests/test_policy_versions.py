"""The policy version a wait opened under, known to every delivery path: it
is recorded with the wait (not in the call's digest), workers publish the
version their app runs with their heartbeat, and a delivery through any path
(a client without the app, `stead approve`, the webhook) is compared with the
live workers' versions; the wake compares it again."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner

import stead
from stead import codec, policy_binding
from stead.cli import main
from stead.records import RecordKind, RecordStatus
from stead.web import create_app
from stead.workflow import waits
from tests.policy_app import VERSION_ENV, make_app

CODE = "refund@1"
ROOT = Path(__file__).resolve().parent.parent


async def _waiting(store: stead.Store, version: str = "refunds@7") -> tuple[str, str, str]:
    """A refund waiting for its approval under policy `version`: (run, wait, token)."""
    app = make_app(version)
    info = await stead.Client(store, app).start("refund", "123")
    await stead.Worker(app, store).run_until_idle()
    [wait] = await stead.Client(store).waits(run_id=info.run_id)
    token = waits.sign((await store.keyring()).current, info.run_id, wait.wait_id)
    return info.run_id, wait.wait_id, token


async def _approve(client: stead.Client, run_id: str, token: str, event_id: str,
                   bind: dict[str, Any] | None = None) -> waits.Delivery:
    return await client.deliver(run_id, kind="approval", event_id=event_id, token=token,
                                payload={"ok": True}, bind=bind or {"order_id": "123"})


async def test_the_wait_records_the_policy_it_opened_under(store: stead.Store) -> None:
    run_id, _wait, _token = await _waiting(store)
    [row] = await stead.Client(store).waits(run_id=run_id)
    assert row.policy_version == "refunds@7" and row.policy_bound
    [opened] = [r for r in await store.load_journal(run_id) if r.kind == RecordKind.WAIT]
    assert json.loads(opened.payload)["policy_version"] == "refunds@7"


async def test_a_worker_publishes_its_policy_version_with_its_heartbeat(
    store: stead.Store,
) -> None:
    await stead.Worker(make_app("refunds@8"), store, stead.WorkerOptions(
        heartbeat=5.0)).run_until_idle()
    await stead.Worker(make_app(None), store).run_until_idle()
    hosts = await stead.Client(store).workers()
    assert sorted((h.policy_version or "none") for h in hosts) == ["none", "refunds@8"]
    assert all(h.live_until is not None and h.live_until > h.seen_at for h in hosts)


async def test_a_delivery_without_the_app_is_compared_with_the_live_workers(
    store: stead.Store,
) -> None:
    run_id, _wait, token = await _waiting(store)
    appless = stead.Client(store)
    await store.heartbeat("after-deploy", [(CODE, "hosts")], policy_version="refunds@8",
                          live_for=600)
    stale = await _approve(appless, run_id, token, "e1")
    assert isinstance(stale, stead.Rejected) and stale.reason == "policy_changed"
    assert "refunds@7" in stale.detail and "refunds@8" in stale.detail
    # The event's own copy of the bound version changes nothing: the store knows.
    copied = await _approve(appless, run_id, token, "e2",
                            {"order_id": "123", "policy_version": "refunds@7"})
    assert isinstance(copied, stead.Rejected) and copied.reason == "policy_changed"
    # A worker on another workflow's policy is not asked.
    await store.heartbeat("elsewhere", [("other@1", "hosts")], policy_version="refunds@7",
                          live_for=600)
    assert isinstance(await _approve(appless, run_id, token, "e3"), stead.Rejected)
    # Mid-deploy, one live worker still runs the wait's version: it is accepted.
    await store.heartbeat("before-deploy", [(CODE, "hosts")], policy_version="refunds@7",
                          live_for=600)
    assert isinstance(await _approve(appless, run_id, token, "e4"), stead.Accepted)


async def test_a_worker_not_heard_from_or_stopped_is_not_live(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    run_id, _wait, token = await _waiting(fstore)
    await fstore.heartbeat("gone", [(CODE, "hosts")], policy_version="refunds@8", live_for=30)
    await fstore.heartbeat("stopped", [(CODE, "hosts")], policy_version="refunds@8",
                           live_for=600)
    await fstore.host_stopped("stopped")
    clock.advance(31)
    # Nobody live knows a policy, and the client has no app: the wake decides.
    assert isinstance(await _approve(stead.Client(fstore), run_id, token, "e1"), stead.Accepted)


async def test_with_no_live_worker_the_client_app_decides(store: stead.Store) -> None:
    run_id, _wait, token = await _waiting(store)
    later = stead.Client(store, make_app("refunds@8"))
    stale = await _approve(later, run_id, token, "e1")
    assert isinstance(stale, stead.Rejected) and stale.reason == "policy_changed"
    assert "the app's policy is now refunds@8" in stale.detail
    # The live workers outrank the client's app: they are the ones that wake it.
    await store.heartbeat("before-deploy", [(CODE, "hosts")], policy_version="refunds@7",
                          live_for=600)
    assert isinstance(await _approve(later, run_id, token, "e2"), stead.Accepted)


async def test_the_wake_compares_again_and_a_deploy_does_not_break_the_replay(
    store: stead.Store,
) -> None:
    run_id, _wait, token = await _waiting(store)
    # Accepted with nobody live to compare with; the worker that wakes the run
    # runs the next policy, whose workflow binds the next version: the replay
    # of the wait matches, and the approval does not count under the new policy.
    assert isinstance(await _approve(stead.Client(store), run_id, token, "e1"), stead.Accepted)
    app = make_app("refunds@8")
    await stead.Worker(app, store).run_until_idle()
    info = await stead.Client(store).get(run_id)
    assert info.status == "completed", info.error
    assert info.result == {"stale": ["refunds@7", "refunds@8"]}
    [_opened, resolved] = [r for r in await store.load_journal(run_id)
                           if r.kind == RecordKind.WAIT]
    assert resolved.status == RecordStatus.ERROR
    assert json.loads(resolved.payload)["type"] == "WaitPolicyChanged"


async def test_the_same_policy_at_the_wake_hands_the_event_over(store: stead.Store) -> None:
    run_id, _wait, token = await _waiting(store)
    app = make_app("refunds@7")
    assert isinstance(await _approve(stead.Client(store, app), run_id, token, "e1"),
                      stead.Accepted)
    await stead.Worker(app, store).run_until_idle()
    assert (await stead.Client(store).get(run_id)).result == {"approved": {"ok": True}}


def test_a_wait_journaled_with_the_version_in_its_digest_still_replays() -> None:
    bind = {"order_id": "123", "policy_version": "refunds@8"}
    legacy = codec.digest("approval", {**bind, "policy_version": "refunds@7"}, None, None, True)
    journaled = stead.Record(0, "0", 1, RecordKind.WAIT, "approval", legacy, RecordStatus.OPEN,
                             json.dumps({"wait_id": "w", "expires_at": None,
                                         "bind": {**bind, "policy_version": "refunds@7"}}),
                             1, 0.0)
    assert policy_binding.open_digest(journaled, "approval", bind, None, None, True) == legacy
    fresh = policy_binding.open_digest(None, "approval", bind, None, None, True)
    assert fresh == codec.digest("approval", {"order_id": "123"}, None, None, True)
    unbound = {"order_id": "123"}
    assert policy_binding.open_digest(None, "approval", unbound, None, None, True) == fresh


# -- every delivery path, against a real worker process --------------------------------------
async def _published(store: stead.Store, version: str, proc: subprocess.Popen[bytes],
                     timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(h.policy_version == version and h.stopped_at is None
                  for h in await store.worker_hosts()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the worker never published policy {version}")
        await asyncio.sleep(0.05)


async def test_stead_approve_without_the_app_and_the_webhook_compare_the_live_workers_policy(
    store: stead.Store, db_url: str, tmp_path: Path,
) -> None:
    run_id, wait_id, token = await _waiting(store)
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stead", "--db", db_url, "worker", "tests.policy_app:app",
             "--heartbeat", "1", "--poll", "0.05"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, VERSION_ENV: "refunds@8", "PYTHONUNBUFFERED": "1"})
    try:
        await _published(store, "refunds@8", proc)
        token_file = tmp_path / "token"
        token_file.write_text(token)
        approve = await asyncio.to_thread(CliRunner().invoke, main, [
            "--db", db_url, "approve", run_id, "--kind", "approval",
            "--token-file", str(token_file)])
        assert approve.exit_code == 1, approve.output
        assert "policy changed" in approve.output
        assert "refunds@7" in approve.output and "refunds@8" in approve.output

        ui = create_app(stead.App("ui-only"), store=store, token="t" * 32)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=ui),
                                     base_url="http://127.0.0.1:8484") as http:
            hooked = await http.post(
                f"/hooks/runs/{run_id}/events", headers={"authorization": f"Bearer {token}"},
                json={"event_id": "hook-1", "wait_id": wait_id, "bind": {"order_id": "123"},
                      "payload": {"ok": True}})
        assert hooked.status_code == 409 and hooked.json()["reason"] == "policy_changed"
        assert (await stead.Client(store).get(run_id)).status == "waiting"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    events = await stead.Client(store).events(run_id)
    assert [e.reason for e in events] == ["policy_changed", "policy_changed"], log.read_text()
