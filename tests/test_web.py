"""The dashboard over HTTP (both stores): pages, login, CSRF, read-only,
escaping, operator actions with their audit, and the event webhook.
tests/test_web_edge.py holds what the boundary refuses."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import stead
from stead import run_ids
from stead.records import RunStatus
from stead.web import create_app, sign_webhook
from stead.workflow.waits import sign as sign_token
from tests import web_app
from tests.ops_app import cli
from tests.web_app import UI_TOKEN, XSS, settle

BASE = "http://127.0.0.1:8484"


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no CSRF field"
    return found.group(1)


@pytest.fixture
async def web(store: stead.Store) -> AsyncIterator[httpx.AsyncClient]:
    asgi = create_app(web_app.app, store=store, token=UI_TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url=BASE) as http:
        yield http


async def _log_in(http: httpx.AsyncClient, who: str = "alice") -> str:
    page = await http.get("/login")
    csrf = _csrf(page.text)
    r = await http.post("/login", data={"csrf": csrf, "who": who, "token": UI_TOKEN})
    assert r.status_code == 303, r.text
    return csrf


async def _waiting(store: stead.Store) -> tuple[stead.Client, str, stead.records.WaitRow]:
    client = stead.Client(store, web_app.app)
    info = await client.start("approval", "123")
    await settle(store)
    [wait] = await client.waits(run_id=info.run_id)
    return client, info.run_id, wait


async def test_the_pages_show_runs_counts_and_what_needs_a_human(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, web_app.app)
    unknown = await client.start("refund", "7", task_id="order-7")
    await client.start("echo", "hi")
    await settle(store)
    await _log_in(web)
    runs = await web.get("/runs")
    assert runs.status_code == 200
    assert "outcome_unknown 1" in runs.text and "completed 1" in runs.text
    only = await web.get("/runs", params={"status": "completed"})
    assert run_ids.short(unknown.run_id) not in only.text
    by_task = await web.get("/runs", params={"task_id": "order-7", "workflow": "refund@1"})
    assert run_ids.short(unknown.run_id) in by_task.text
    attention = await web.get("/attention")
    assert "outcome_unknown" in attention.text and run_ids.short(unknown.run_id) in attention.text
    assert "Reconcile the effect" in attention.text
    page = await web.get(f"/runs/{unknown.run_id}")
    assert "dispatch_refund" in page.text and f"{unknown.run_id}:" in page.text  # its key
    assert (await web.get("/runs/nope")).status_code == 404


async def test_an_action_needs_a_login_a_same_site_form_and_a_writable_dashboard(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client, run_id, wait = await _waiting(store)
    page = await web.get(f"/runs/{run_id}")
    assert page.status_code == 401 and "actions/approve" not in page.text  # before the login
    assert run_id not in page.text and "Log in" in page.text
    csrf = _csrf((await web.get("/login")).text)
    form = {"csrf": csrf, "target": wait.wait_id, "why": "ok", "expect_status": "waiting"}
    # no login: 401
    r = await web.post(f"/runs/{run_id}/actions/approve", data=form)
    assert r.status_code == 401
    await _log_in(web)
    # a cross-site form: no CSRF token of ours, another Origin: 403
    r = await web.post(f"/runs/{run_id}/actions/approve", data={**form, "csrf": "forged"},
                       headers={"Origin": "https://evil.example"})
    assert r.status_code == 403
    r = await web.post(f"/runs/{run_id}/actions/approve", data={**form, "csrf": ""})
    assert r.status_code == 403
    assert (await client.get(run_id)).status == RunStatus.WAITING
    # a wrong password does not log in
    bad = await web.post("/login", data={"csrf": csrf, "who": "mallory", "token": "x" * 26})
    assert bad.status_code == 401


async def test_read_only_shows_no_form_and_takes_no_action(store: stead.Store) -> None:
    client, run_id, wait = await _waiting(store)
    asgi = create_app(web_app.app, store=store, token=UI_TOKEN, read_only=True, public=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url=BASE) as http:
        page = await http.get(f"/runs/{run_id}")
        assert "actions/approve" not in page.text and "Read-only" in page.text
        csrf = _csrf((await http.get("/login")).text)
        r = await http.post(f"/runs/{run_id}/actions/approve", data={
            "csrf": csrf, "target": wait.wait_id, "why": "ok"})
        assert r.status_code == 403 and "read-only" in r.text
    assert (await client.get(run_id)).status == RunStatus.WAITING


async def test_markup_in_a_step_result_is_escaped(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, web_app.app)
    info = await client.start("echo", XSS, task_id=XSS)
    await settle(store)
    await _log_in(web)
    for url in (f"/runs/{info.run_id}", "/runs"):
        html = (await web.get(url)).text
        assert "<script>window" not in html and "<img src=x" not in html
        assert "&lt;script&gt;" in html


async def test_an_operator_approval_is_an_audited_operator_delivery(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client, run_id, wait = await _waiting(store)
    await _log_in(web, "alice")
    page = await web.get(f"/runs/{run_id}")
    form = {"csrf": _csrf(page.text), "target": wait.wait_id, "why": "called the customer",
            "expect_status": "waiting", "expect_epoch": str((await client.get(run_id)).epoch),
            "nonce": "n1", "payload": '{"note": "by phone"}'}
    r = await web.post(f"/runs/{run_id}/actions/approve", data=form)
    assert r.status_code == 200 and "Accepted: event" in r.text, r.text
    [event] = await client.events(run_id)
    assert (event.delivered_by, event.delivered_why) == ("alice", "called the customer")
    assert json.loads(event.payload) == {"note": "by phone", "approved": True}
    await settle(store)
    assert await client.result(run_id) == {"decision": {"note": "by phone", "approved": True}}
    shown = (await web.get(f"/runs/{run_id}", params={"tab": "audit"})).text
    assert "operator alice" in shown and "called the customer" in shown
    [audit] = await store.list_actions(run_id)
    assert (audit.action, audit.author, audit.outcome) == ("approve", "alice", "done")


async def test_a_stale_page_action_is_refused_with_the_reason_and_audited(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client, run_id, wait = await _waiting(store)
    await _log_in(web, "bob")
    page = await web.get(f"/runs/{run_id}")
    epoch = (await client.get(run_id)).epoch
    await client.revoke_wait(wait.wait_id)  # meanwhile the run moves on
    await settle(store)
    r = await web.post(f"/runs/{run_id}/actions/approve", data={
        "csrf": _csrf(page.text), "target": wait.wait_id, "why": "late",
        "expect_status": "waiting", "expect_epoch": str(epoch)})
    assert r.status_code == 409
    assert "moved on" in r.text and "it is failed" in r.text
    [audit] = await store.list_actions(run_id)
    assert audit.outcome == "refused" and "moved on" in audit.detail


# -- the webhook ---------------------------------------------------------------------
async def _hook(http: httpx.AsyncClient, path: str, body: Any, **headers: str) -> httpx.Response:
    raw = json.dumps(body).encode()
    return await http.post(path, content=raw,
                           headers={"content-type": "application/json", **headers})


async def test_the_webhook_answers_accepted_duplicate_and_rejected_with_the_reason(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    _client, run_id, wait = await _waiting(store)
    token = sign_token((await store.keyring()).current, run_id, wait.wait_id)
    path = f"/hooks/runs/{run_id}/events"
    wrong = await _hook(web, path, {"event_id": "e0", "wait_id": wait.wait_id,
                                     "bind": {"order_id": "999"}, "token": token})
    assert wrong.status_code == 409
    assert wrong.json()["reason"] == "bound_value_mismatch"
    body = {"event_id": "e1", "wait_id": wait.wait_id, "bind": {"order_id": "123"},
            "payload": {"approved": True}}
    ok = await _hook(web, path, body, Authorization=f"Bearer {token}")
    assert ok.status_code == 200 and ok.json()["verdict"] == "accepted"
    again = await _hook(web, path, {**body, "token": token})
    assert again.status_code == 200 and again.json()["verdict"] == "duplicate"
    other = await _hook(web, path, {**body, "event_id": "e2", "token": token})
    assert other.status_code == 409 and other.json()["reason"] == "already_consumed"


async def test_the_webhook_takes_an_hmac_signature_instead_of_the_token(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, web_app.app)
    info = await client.start("approval", "5", task_id="order-5")
    await settle(store)
    body = {"event_id": "signed-1", "kind": "approval", "bind": {"order_id": "5"},
            "payload": {"approved": True}}
    raw = json.dumps(body).encode()
    key = (await store.keyring()).current
    path = "/hooks/tasks/order-5/events"
    headers = {"content-type": "application/json"}
    forged = await web.post(path, content=raw, headers={
        **headers, "Stead-Signature": sign_webhook(key, path, raw + b" ")})
    assert forged.status_code == 401 and "does not match" in forged.text
    unsigned = await web.post(path, content=raw, headers=headers)
    assert unsigned.status_code == 401
    stale = await web.post(path, content=raw, headers={
        **headers, "Stead-Signature": sign_webhook(key, path, raw, at=time.time() - 3600)})
    assert stale.status_code == 401 and "from now" in stale.text
    for bad in ("t=1,k=x", "t=" + "9" * 5000 + f",k={key.id},v1=00", "v1=zz"):
        refused = await web.post(path, content=raw, headers={**headers, "Stead-Signature": bad})
        assert refused.status_code == 401
    ok = await web.post(path, content=raw, headers={
        **headers, "Stead-Signature": sign_webhook(key, path, raw)})
    assert ok.status_code == 200 and ok.json()["run_id"] == info.run_id, ok.text
    [event] = await client.events(info.run_id)
    assert event.delivered_by == f"webhook (key {key.id})"
    nowhere = "/hooks/tasks/no-such-task/events"
    missing = await web.post(nowhere, content=raw, headers={
        **headers, "Stead-Signature": sign_webhook(key, nowhere, raw)})
    assert missing.status_code == 409 and missing.json()["reason"] == "unknown_run"


async def test_the_webhook_refuses_large_bodies_and_anything_but_json(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client, run_id, _wait = await _waiting(store)
    path = f"/hooks/runs/{run_id}/events"
    huge = await _hook(web, path, {"event_id": "big", "payload": "x" * 400_000, "token": "t"})
    assert huge.status_code == 413
    form = await web.post(path, data={"event_id": "f"})
    assert form.status_code == 415
    broken = await web.post(path, content=b"{not json",
                            headers={"content-type": "application/json"})
    assert broken.status_code == 400
    listed = await _hook(web, path, ["event_id"])
    assert listed.status_code == 400
    no_id = await _hook(web, path, {"payload": 1, "token": "t"})
    assert no_id.status_code == 400 and "event_id" in no_id.text
    assert await client.events(run_id) == []


def test_stead_ui_binds_to_loopback_and_refuses_a_short_token(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    shown = cli(sqlite_url, "ui", "--help")
    assert shown.exit_code == 0 and "127.0.0.1" in shown.output
    assert "--public" in shown.output and "--allow-host" in shown.output
    missing = cli(sqlite_url, "ui", "tests.web_app:app")  # no database there yet
    assert missing.exit_code != 0 and "no database" in missing.output
    assert cli(sqlite_url, "db", "migrate").exit_code == 0
    monkeypatch.setenv("STEAD_UI_TOKEN", "short")
    short = cli(sqlite_url, "ui", "tests.web_app:app")
    assert short.exit_code != 0 and "too short" in short.output


async def test_a_run_page_shows_its_forks_with_links_both_ways(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, web_app.app)
    parent = await client.start("echo", "hi")
    await settle(store)
    await _log_in(web)
    fork = await client.fork(parent.run_id, at=1)
    shown = (await web.get(f"/runs/{parent.run_id}")).text
    assert "Lineage" in shown and f'href="/runs/{fork.run_id}"' in shown
    shown = (await web.get(f"/runs/{fork.run_id}")).text
    assert "forked from" in shown and f'href="/runs/{parent.run_id}"' in shown
    assert "Fork a new run from its journal" in shown
