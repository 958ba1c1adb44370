"""What the dashboard's and the webhook's boundary refuses (both stores): a
signature sent to another run or replayed, junk tokens that would lock an
approval, guessing from one address, a rebound Host, reading without a login,
bodies over the limit (declared or streamed), invisible characters; and
hostile input that must never be a 500 nor store anything."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.types import ASGIApp, Message

import stead
from stead import run_ids
from stead.records import EventRow, Judgement, RunStatus
from stead.store.base import Judge
from stead.testing import DelegatingStore
from stead.web import create_app, sign_webhook
from stead.web import throttle as throttling
from stead.workflow.waits import sign as sign_token
from tests import stress, web_app
from tests.ops_app import cli
from tests.web_app import UI_TOKEN, settle

BASE = "http://127.0.0.1:8484"
ROOT = Path(__file__).resolve().parent.parent
JSON = {"content-type": "application/json"}


def _http(asgi: ASGIApp, source: str = "127.0.0.1", base: str = BASE) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi, client=(source, 4321)),
                             base_url=base)


@pytest.fixture
def asgi(store: stead.Store) -> ASGIApp:
    return create_app(web_app.app, store=store, token=UI_TOKEN)


@pytest.fixture
async def web(asgi: ASGIApp) -> AsyncIterator[httpx.AsyncClient]:
    async with _http(asgi) as http:
        yield http


async def _waiting(store: stead.Store, order: str = "1", task_id: str | None = None,
                   ) -> tuple[stead.Client, str, stead.records.WaitRow]:
    client = stead.Client(store, web_app.app)
    info = await client.start("approval", order, task_id=task_id)
    await settle(store)
    [wait] = await client.waits(run_id=info.run_id)
    return client, info.run_id, wait


async def _token(store: stead.Store, run_id: str, wait: stead.records.WaitRow) -> str:
    return sign_token((await store.keyring()).current, run_id, wait.wait_id)


def _event(wait: stead.records.WaitRow, event_id: str = "e-1", order: str = "1") -> bytes:
    return json.dumps({"event_id": event_id, "wait_id": wait.wait_id,
                       "bind": {"order_id": order}}).encode()


async def _signed(http: httpx.AsyncClient, path: str, raw: bytes,
                  signature: str) -> httpx.Response:
    return await http.post(path, content=raw, headers={**JSON, "Stead-Signature": signature})


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no CSRF field"
    return found.group(1)


async def _log_in(http: httpx.AsyncClient, token: str = UI_TOKEN) -> httpx.Response:
    csrf = _csrf((await http.get("/login")).text)
    return await http.post("/login", data={"csrf": csrf, "who": "alice", "token": token})


# -- (2) a signature is bound to its request ----------------------------------------------
async def test_a_signed_event_for_one_run_is_refused_at_another_runs_url(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client, a, _ = await _waiting(store)
    _, b, _ = await _waiting(store)  # the same kind, bound to the same values
    raw = json.dumps({"event_id": "e-1", "kind": "approval", "bind": {"order_id": "1"},
                      "payload": {"approved": True}}).encode()
    key = (await store.keyring()).current
    signed = sign_webhook(key, f"/hooks/runs/{a}/events", raw)
    moved = await web.post(f"/hooks/runs/{b}/events", content=raw,
                           headers={**JSON, "Stead-Signature": signed})
    assert moved.status_code == 401 and "does not match" in moved.text
    assert b not in moved.text and a not in moved.text
    assert await client.events(b) == []
    assert (await client.get(b)).status == RunStatus.WAITING
    ok = await web.post(f"/hooks/runs/{a}/events", content=raw,
                        headers={**JSON, "Stead-Signature": signed})
    assert ok.status_code == 200 and ok.json()["verdict"] == "accepted", ok.text


async def test_a_signature_is_taken_once_and_a_new_one_redelivers(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client, run_id, wait = await _waiting(store)
    path = f"/hooks/runs/{run_id}/events"
    # first sent before it fits (a wrong bound value): rejected, and judged
    early = _event(wait, "e-1", order="2")
    key = (await store.keyring()).current
    signed = sign_webhook(key, path, early)
    first = await _signed(web, path, early, signed)
    assert first.status_code == 409 and first.json()["reason"] == "bound_value_mismatch"
    again = await _signed(web, path, early, signed)
    assert again.status_code == 401 and "taken already" in again.text
    raw = _event(wait, "e-2")
    signed = sign_webhook(key, path, raw)
    assert (await _signed(web, path, raw, signed)).json()["verdict"] == "accepted"
    assert (await _signed(web, path, raw, signed)).status_code == 401  # replayed
    resigned = await _signed(web, path, raw, sign_webhook(key, path, raw, at=time.time() + 1))
    assert resigned.status_code == 200 and resigned.json()["verdict"] == "duplicate"
    assert [e.event_id for e in await client.events(run_id)] == ["e-1", "e-2"]


async def test_the_method_time_and_event_id_are_signed_too(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    _, run_id, wait = await _waiting(store)
    path = f"/hooks/runs/{run_id}/events"
    raw = _event(wait)
    key = (await store.keyring()).current
    signed = sign_webhook(key, path, raw)
    t, k, mac = signed.split(",")
    later = f"t={int(t[2:]) + 5},{k},{mac}"
    for header in (sign_webhook(key, path, raw, method="PUT"), later):
        r = await _signed(web, path, raw, header)
        assert r.status_code == 401 and "does not match" in r.text
    assert (await _signed(web, path, _event(wait, "e-9"), signed)).status_code == 401


async def test_the_tolerance_is_configurable(store: stead.Store) -> None:
    _, run_id, wait = await _waiting(store)
    path = f"/hooks/runs/{run_id}/events"
    raw = _event(wait)
    key = (await store.keyring()).current
    async with _http(create_app(web_app.app, store=store, signature_tolerance=30)) as http:
        old = await _signed(http, path, raw, sign_webhook(key, path, raw, at=time.time() - 120))
        assert old.status_code == 401 and "more than 30 s" in old.text
        fresh = await _signed(http, path, raw, sign_webhook(key, path, raw, at=time.time() - 10))
        assert fresh.status_code == 200, fresh.text


async def test_signatures_follow_key_rotation_and_revocation(db_url: str) -> None:
    old, new = stead.keys.new_key(), stead.keys.new_key()
    rings = [stead.Keyring((old, new))]
    store = await stead.open_store(db_url, keys=lambda: rings[-1])
    try:
        async with _http(create_app(web_app.app, store=store)) as http:
            _, run_id, wait = await _waiting(store)
            path = f"/hooks/runs/{run_id}/events"
            rings.append(stead.Keyring((old, new), revoked=frozenset({old.id})))
            first, second = _event(wait, "e-1"), _event(wait, "e-2")
            revoked = await _signed(http, path, first, sign_webhook(old, path, first))
            assert revoked.status_code == 401 and "revoked or unknown" in revoked.text
            rings.append(stead.Keyring((old, new)))  # the older key still verifies
            ok = await _signed(http, path, second, sign_webhook(old, path, second))
            assert ok.status_code == 200 and ok.json()["verdict"] == "accepted", ok.text
    finally:
        await store.close()


class Unreachable(DelegatingStore):
    """The database is unreachable for the first delivery."""

    def __init__(self, inner: stead.Store) -> None:
        super().__init__(inner)
        self.down = True

    async def deliver(self, event: EventRow, judge: Judge) -> tuple[Judgement, EventRow]:
        if self.down:
            self.down = False
            raise stead.StoreUnavailable("the database is unreachable")
        return await self.inner.deliver(event, judge)


async def test_a_signature_that_met_an_unavailable_store_is_taken_on_retry(
    store: stead.Store,
) -> None:
    _, run_id, wait = await _waiting(store)
    path, raw = f"/hooks/runs/{run_id}/events", _event(wait)
    signed = sign_webhook((await store.keyring()).current, path, raw)
    async with _http(create_app(web_app.app, store=Unreachable(store))) as http:
        down = await _signed(http, path, raw, signed)
        assert down.status_code == 503, down.text
        retried = await _signed(http, path, raw, signed)  # the sender's retry, unchanged
        assert retried.status_code == 200 and retried.json()["verdict"] == "accepted"


# -- (3) unauthenticated failures lock nothing and say nothing ------------------------------
async def test_junk_tokens_from_anyone_do_not_lock_the_approval(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client, run_id, wait = await _waiting(store, task_id="order-1")
    path = "/hooks/tasks/order-1/events"
    body = {"event_id": "junk", "kind": "approval", "bind": {"order_id": "1"}}
    for n in range(12):
        junk = await web.post(path, json={**body, "event_id": f"junk-{n}",
                                          "token": f"stk1.{n}.guess"})
        assert junk.status_code == 401
    [still] = await client.waits(run_id=run_id)
    assert (still.bad_tokens, still.locked_at) == (0, None)
    assert await client.events(run_id) == []  # nothing stored for them
    real = await web.post(path, json={**body, "event_id": "real",
                                      "token": await _token(store, run_id, wait)})
    assert real.status_code == 200 and real.json()["verdict"] == "accepted", real.text


async def test_an_unauthenticated_caller_gets_one_answer_whatever_exists(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client, run_id, wait = await _waiting(store, task_id="order-1")
    _, other, other_wait = await _waiting(store, "2")
    good = await _token(store, run_id, wait)
    [accepted] = [await web.post(f"/hooks/runs/{run_id}/events", json={
        "event_id": "known", "wait_id": wait.wait_id, "bind": {"order_id": "1"},
        "token": good})]
    assert accepted.json()["verdict"] == "accepted"
    body = {"event_id": "known", "wait_id": wait.wait_id, "bind": {"order_id": "1"}}
    answers = [
        await web.post(f"/hooks/runs/{run_id}/events", json={**body, "token": "stk1.x.y"}),
        await web.post(f"/hooks/runs/{run_id}/events", json=body),  # no token at all
        await web.post("/hooks/runs/no-such-run/events", json={**body, "token": "stk1.x.y"}),
        await web.post("/hooks/tasks/no-such-task/events", json={**body, "token": good}),
        await web.post("/hooks/tasks/order-1/events", json={**body, "token": "stk_guessing"}),
        # the token of another run's wait, for this one
        await web.post(f"/hooks/runs/{run_id}/events", json={
            **body, "token": await _token(store, other, other_wait)}),
    ]
    assert {(a.status_code, a.text) for a in answers} == {(401, answers[0].text)}
    for a in answers:
        assert run_id not in a.text and wait.wait_id not in a.text
        assert "duplicate" not in a.text
    assert [e.event_id for e in await client.events(run_id)] == ["known"]


async def test_failures_from_one_address_are_throttled_not_another_address(
    asgi: ASGIApp, store: stead.Store,
) -> None:
    _, run_id, wait = await _waiting(store)
    path = f"/hooks/runs/{run_id}/events"
    body = {"event_id": "e", "wait_id": wait.wait_id, "bind": {"order_id": "1"}}
    limit, _window = throttling.WEBHOOK
    async with _http(asgi, "203.0.113.9") as noisy, _http(asgi, "198.51.100.7") as approver:
        for n in range(limit):
            assert (await noisy.post(path, json={**body, "token": f"stk1.k.{n}"})
                    ).status_code == 401
        slowed = await noisy.post(path, json={**body, "token": await _token(store, run_id, wait)})
        assert slowed.status_code == 429 and int(slowed.headers["retry-after"]) > 0
        ok = await approver.post(path, json={**body, "token": await _token(store, run_id, wait)})
        assert ok.status_code == 200 and ok.json()["verdict"] == "accepted", ok.text


async def test_wrong_logins_are_throttled_per_address_and_the_right_token_always_logs_in(
    asgi: ASGIApp,
) -> None:
    limit, _window = throttling.LOGIN
    async with _http(asgi, "203.0.113.9") as guesser, _http(asgi, "198.51.100.7") as alice:
        for _ in range(limit):
            assert (await _log_in(guesser, "x" * 26)).status_code == 401
        slowed = await _log_in(guesser, "y" * 26)
        assert slowed.status_code == 429 and "Too many wrong tokens" in slowed.text
        assert int(slowed.headers["retry-after"]) > 0
        # Whoever failed before from this address, the right token logs in.
        assert (await _log_in(guesser)).status_code == 303
        assert (await _log_in(alice, "z" * 26)).status_code == 401  # not throttled
        assert (await _log_in(alice)).status_code == 303


async def test_behind_a_trusted_proxy_logins_are_throttled_per_forwarded_client(
    store: stead.Store,
) -> None:
    # Everyone reaches the dashboard from the proxy's address; the proxy
    # names each client in X-Forwarded-For, believed from the proxy only.
    asgi = create_app(web_app.app, store=store, token=UI_TOKEN, trusted_proxies=["127.0.0.1"])
    limit, _window = throttling.LOGIN

    async with _http(asgi, "127.0.0.1") as proxy:
        async def log_in(client: str, token: str) -> int:
            csrf = _csrf((await proxy.get("/login")).text)
            return (await proxy.post("/login", headers={"X-Forwarded-For": client}, data={
                "csrf": csrf, "who": "alice", "token": token})).status_code

        for _ in range(limit):
            assert await log_in("203.0.113.9", "x" * 26) == 401
        assert await log_in("203.0.113.9", "x" * 26) == 429
        assert await log_in("198.51.100.7", "x" * 26) == 401  # another client behind it
        assert await log_in("198.51.100.7", UI_TOKEN) == 303
        # What a client wrote before the proxy appended its address is not believed.
        assert await log_in("198.51.100.77, 203.0.113.9", "x" * 26) == 429
    async with _http(asgi, "127.0.0.1") as tls:
        # The proxy terminates TLS: the cookies it relays are for https only.
        page = await tls.get("/login", headers={"X-Forwarded-Proto": "https"})
        assert "secure" in page.headers["set-cookie"].lower()
    async with _http(asgi, "203.0.113.50") as direct:  # not the proxy: its header is not believed
        for n in range(limit):
            csrf = _csrf((await direct.get("/login")).text)
            await direct.post("/login", headers={"X-Forwarded-For": f"192.0.2.{n}"},
                              data={"csrf": csrf, "who": "a", "token": "x" * 26})
        csrf = _csrf((await direct.get("/login")).text)
        refused = await direct.post("/login", headers={"X-Forwarded-For": "192.0.2.99"},
                                    data={"csrf": csrf, "who": "a", "token": "x" * 26})
        assert refused.status_code == 429
    async with _http(asgi, "203.0.113.51") as direct:
        page = await direct.get("/login", headers={"X-Forwarded-Proto": "https"})
        assert "secure" not in page.headers["set-cookie"].lower()


def test_the_throttle_forgets_ended_windows_and_holds_a_bounded_number() -> None:
    now = [0.0]
    t = throttling.Throttle(2, 10.0, sources=3, clock=lambda: now[0])
    t.failed("a")
    t.failed("a")
    assert t.refused_for("a") == 10.0 and t.refused_for("b") == 0.0
    now[0] = 4.0
    assert t.refused_for("a") == 6.0
    for source in ("b", "c", "d", "e"):
        t.failed(source)
    assert len(t) == 3  # the oldest windows gave way
    now[0] = 30.0
    assert t.refused_for("a") == 0.0
    t.failed("f")
    assert len(t) == 1


# -- (4) the Host is one of ours; reading needs a login ------------------------------------
async def test_a_rebound_host_is_refused_on_every_route(
    asgi: ASGIApp, store: stead.Store,
) -> None:
    _, run_id, _ = await _waiting(store)
    async with _http(asgi, base="http://attacker.example") as rebound:
        for r in (await rebound.get("/runs"), await rebound.get(f"/runs/{run_id}"),
                  await rebound.get("/login"),
                  await rebound.post(f"/hooks/runs/{run_id}/events", json={"event_id": "e"})):
            assert r.status_code == 421 and run_id not in r.text
            assert "--allow-host" in r.text
    for base in ("http://localhost:8484", "http://[::1]:8484", "http://127.0.0.1"):
        async with _http(asgi, base=base) as local:
            assert (await local.get("/login")).status_code == 200, base
    named = create_app(web_app.app, store=store, token=UI_TOKEN, hosts=["Dash.Example"])
    async with _http(named, base="https://dash.example") as http:
        assert (await http.get("/login")).status_code == 200


async def test_reading_needs_a_login_unless_the_dashboard_is_public(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    _, run_id, _ = await _waiting(store)
    for url in ("/", "/runs", "/attention", f"/runs/{run_id}", "/runs?fragment=1",
                f"/runs/{run_id}?fragment=1"):
        closed = await web.get(url)
        assert closed.status_code == 401 and run_id not in closed.text, url
    assert (await _log_in(web)).status_code == 303
    assert run_ids.short(run_id) in (await web.get("/runs")).text
    public = create_app(web_app.app, store=store, public=True)
    async with _http(public) as http:
        shown = await http.get("/runs")
        assert shown.status_code == 200 and run_ids.short(run_id) in shown.text
    nobody = create_app(web_app.app, store=store)  # no token, no hook, not public
    async with _http(nobody) as http:
        r = await http.get("/runs")
        assert r.status_code == 401 and "--public" in r.text


@contextlib.contextmanager
def _stead_ui(db_url: str, tmp_path: Path, *args: str,
              token: str | None = None) -> Iterator[str]:
    """`stead ui tests.web_app:app ARGS` in its own process, served by
    uvicorn as a user runs it; yields its base URL once it listens."""
    assert cli(db_url, "db", "migrate").exit_code == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "STEAD_UI_TOKEN"}
    if token is not None:
        env["STEAD_UI_TOKEN"] = token
    log = tmp_path / "ui.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stead", "--db", db_url, "ui", "tests.web_app:app",
             "--port", str(port), *args],
            cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
            stderr=err)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:  # until it listens (or has died)
            try:
                httpx.get(f"{base}/login", timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_stead_ui_serves_the_names_it_is_given_and_public_pages(
    sqlite_url: str, tmp_path: Path,
) -> None:
    """`stead ui --allow-host NAME --public` in its own process: the name is
    served and the pages are shown without a login; any other name is 421."""
    with _stead_ui(sqlite_url, tmp_path, "--allow-host", "dash.example", "--public") as base:
        url = f"{base}/runs"
        assert httpx.get(url, timeout=5).status_code == 200  # --public: no login to read
        assert httpx.get(url, headers={"Host": "dash.example"}, timeout=5).status_code == 200
        rebound = httpx.get(url, headers={"Host": "attacker.example"}, timeout=5)
        assert rebound.status_code == 421


def test_stead_ui_behind_its_trusted_proxy_names_operators_and_throttles_each_client(
    sqlite_url: str, tmp_path: Path,
) -> None:
    """`stead ui --trusted-proxy 127.0.0.1` in its own process, reached as
    through an SSO proxy on this machine, which names the client in
    X-Forwarded-For as well as the operator."""
    limit, _window = throttling.LOGIN
    with _stead_ui(sqlite_url, tmp_path, "--trusted-proxy", "127.0.0.1",
                   "--proxy-group", "ops=operator", token=UI_TOKEN) as base, \
            httpx.Client(base_url=base, timeout=10) as proxy:
        named = proxy.get("/runs", headers={"X-Forwarded-For": "203.0.113.5",
                                            "X-Forwarded-User": "olga",
                                            "X-Forwarded-Groups": "ops"})
        assert named.status_code == 200 and "olga" in named.text

        def log_in(client: str, token: str) -> int:
            with httpx.Client(base_url=base, timeout=10) as browser:  # its own cookies
                csrf = _csrf(browser.get("/login").text)
                return browser.post("/login", headers={"X-Forwarded-For": client}, data={
                    "csrf": csrf, "who": "alice", "token": token}).status_code

        for _ in range(limit):
            assert log_in("203.0.113.9", "x" * 26) == 401
        assert log_in("203.0.113.9", "x" * 26) == 429
        assert log_in("198.51.100.7", "x" * 26) == 401  # another client of the proxy
        assert log_in("203.0.113.9", UI_TOKEN) == 303  # the right token, whatever failed


# -- (5) bodies are bounded before they are read --------------------------------------------
async def _raw_post(asgi: ASGIApp, path: str, chunks: list[bytes],
                    headers: dict[str, str]) -> tuple[int, int]:
    """POST `chunks` to `asgi` as a streamed body; the status, and how many
    chunks the app pulled before it answered."""
    pulled, sent = 0, []

    async def receive() -> Message:
        nonlocal pulled
        if pulled < len(chunks):
            pulled += 1
            return {"type": "http.request", "body": chunks[pulled - 1],
                    "more_body": pulled < len(chunks)}
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 8484),
             "headers": [(b"host", b"127.0.0.1:8484"),
                         *((k.encode(), v.encode()) for k, v in headers.items())]}
    await asgi(scope, receive, send)
    [start] = [m for m in sent if m["type"] == "http.response.start"]
    return int(start["status"]), pulled


@pytest.mark.parametrize(("path", "unread"), [
    ("/login", 413), ("/logout", 413), ("/runs/r/actions/approve", 413),
    ("/hooks/runs/r/events", 413), ("/runs", 405)])  # a page takes no POST: nothing read
async def test_a_large_body_is_refused_before_it_is_read(asgi: ASGIApp, path: str,
                                                         unread: int) -> None:
    form = "multipart/form-data; boundary=x" if "hooks" not in path else "application/json"
    # a file being uploaded, 500 MB of it
    head = (b'--x\r\nContent-Disposition: form-data; name="f"; filename="f"\r\n\r\n'
            if "hooks" not in path else b'{"event_id": "e", "payload": "')
    chunks = [head] + [b"x" * 64 * 1024] * 8000
    declared, pulled = await _raw_post(asgi, path, chunks, {
        "content-type": form, "content-length": str(500 * 1024 * 1024)})
    assert (declared, pulled) == (413, 0)
    # streamed, with no length: refused once the bytes received pass the limit
    streamed, pulled = await _raw_post(asgi, path, chunks, {"content-type": form})
    assert streamed == unread and pulled <= 6, pulled


@pytest.mark.parametrize("length", ["\u00b9", "9" * 5000, "-1", "12a"])
async def test_a_content_length_that_is_no_whole_number_is_refused(asgi: ASGIApp,
                                                                   length: str) -> None:
    status, pulled = await _raw_post(asgi, "/login", [b"x"], {
        "content-type": "application/x-www-form-urlencoded",
        "content-length": length.encode("utf-8").decode("latin-1")})
    assert (status, pulled) == (413, 0)


async def test_a_body_within_the_limit_is_read(web: httpx.AsyncClient) -> None:
    csrf = _csrf((await web.get("/login")).text)
    r = await web.post("/login", data={"csrf": csrf, "who": "a" * 4000, "token": UI_TOKEN})
    assert r.status_code == 303


# -- (12) invisible characters are named on the dashboard ------------------------------------
async def test_bidi_overrides_and_invisible_characters_are_shown_neutralised(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, web_app.app)
    text = "refund\u202egpj.exe\u2066\u200b"
    info = await client.start("echo", text, task_id="t\u202e1")
    await settle(store)
    await _log_in(web)
    for url in (f"/runs/{info.run_id}", "/runs", "/runs?task_id=t%E2%80%AE1"):
        html = (await web.get(url)).text
        assert not re.search("[\u202a-\u202e\u2066-\u2069\u200b\u200e\u200f]", html), url
        assert "[U+202E]" in html, url
    assert "refund[U+202E]gpj.exe[U+2066][U+200B]" in (await web.get(
        f"/runs/{info.run_id}")).text


# -- hostile input: never a 500, nothing stored that should not be --------------------------
_sources = itertools.count(1)


async def _live(store: stead.Store, task_id: str) -> tuple[stead.Client, stead.RunInfo]:
    """The waiting run of `task_id`, started if an earlier example ended it."""
    client = stead.Client(store, web_app.app)
    live = await client.run_of_task(task_id)
    if live is None:
        live = await client.start("approval", task_id, task_id=task_id)
        await settle(store)
    return client, live


def _fresh_source() -> str:
    """An address of its own for each example, so no example is throttled
    for the failures of the ones before it."""
    n = next(_sources)
    return f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"


ids = st.one_of(st.text(max_size=40), st.sampled_from(["", "\x00", "\ud800", "../..", "%00"]))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                               max_size=3),
    max_leaves=10)
bodies = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda d: json.dumps(d).encode(), json_values),
    st.builds(lambda e, w, k, t, b, p: json.dumps(
        {"event_id": e, "wait_id": w, "kind": k, "token": t, "bind": b, "payload": p}).encode(),
        ids, st.none() | ids, st.none() | ids, st.none() | ids,
        st.none() | json_values, json_values),
)


@settings(max_examples=stress.examples(60), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=bodies, target=st.sampled_from(["run", "task", "unknown", "hostile"]),
       signature=st.none() | st.text(max_size=80), hostile=ids,
       bearer=st.none() | st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126),
                                  max_size=40))
async def test_hostile_webhook_calls_are_never_a_500_and_store_nothing(
    asgi: ASGIApp, store: stead.Store, body: bytes, target: str,
    signature: str | None, hostile: str, bearer: str | None,
) -> None:
    client, live = await _live(store, "order-h")
    segment = urllib.parse.quote(hostile.encode("utf-8", "surrogatepass"), safe="")
    path = {"run": f"/hooks/runs/{live.run_id}/events", "task": "/hooks/tasks/order-h/events",
            "unknown": "/hooks/runs/nope/events", "hostile": f"/hooks/tasks/{segment}/events",
            }[target]
    headers: dict[str, bytes] = {"content-type": b"application/json"}
    if signature is not None:  # any bytes a server passes on (no line breaks, no NUL)
        headers["Stead-Signature"] = re.sub(r"[\r\n\x00]", "", signature).encode(
            "utf-8", "surrogatepass")
    if bearer is not None:
        headers["Authorization"] = f"Bearer {bearer}".encode()
    async with _http(asgi, _fresh_source()) as http:
        r = await http.post(path, content=body, headers=headers)
    assert r.status_code < 500 and "Traceback" not in r.text, (r.status_code, r.text)
    assert r.status_code in (400, 401, 404, 405, 429), (r.status_code, r.text)
    assert await client.events(live.run_id) == []
    [w] = await client.waits(run_id=live.run_id)
    assert (w.bad_tokens, w.locked_at) == (0, None)


events = st.builds(
    lambda e, w, k, b, p, why: {"event_id": e, "wait_id": w, "kind": k, "bind": b,
                                "payload": p, "why": why},
    ids, st.none() | ids, st.none() | ids | st.just("approval"),
    st.none() | json_values | st.just({"order_id": "order-s"}), json_values, st.none() | ids)


@settings(max_examples=stress.examples(60), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(event=events, to_task=st.booleans())
@example(event={"event_id": "e", "wait_id": None, "kind": None, "bind": None, "payload": {},
                "why": "\x1f"}, to_task=True)  # blank to str.strip(), not to a test of "or"
@example(event={"event_id": "e", "wait_id": None, "kind": None, "bind": None, "payload": {},
                "why": 5}, to_task=False)
async def test_hostile_signed_events_are_never_a_500(
    asgi: ASGIApp, store: stead.Store, event: dict[str, Any], to_task: bool,
) -> None:
    """Signed with stead's key (so past authentication), whatever the fields
    hold: a verdict or a 400, never a 500; a refused body stores nothing."""
    client, live = await _live(store, "order-s")
    path = "/hooks/tasks/order-s/events" if to_task else f"/hooks/runs/{live.run_id}/events"
    raw = json.dumps(event).encode()
    key = (await store.keyring()).current
    try:
        signature = sign_webhook(key, path, raw)
    except stead.InvalidInput:  # no event id to sign
        signature = f"t={int(time.time())},k={key.id},v1=00"
    before = await client.events(live.run_id)
    async with _http(asgi, _fresh_source()) as http:
        r = await _signed(http, path, raw, signature)
    assert r.status_code < 500 and "Traceback" not in r.text, (r.status_code, r.text)
    if r.status_code in (400, 401, 413):
        assert await client.events(live.run_id) == before


forms = st.dictionaries(st.sampled_from(["csrf", "who", "token", "target", "why", "payload",
                                         "expect_status", "expect_epoch", "nonce", "junk"]),
                        st.text(max_size=60), max_size=8)


@settings(max_examples=stress.examples(60), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(form=forms, action=st.sampled_from(["approve", "reject", "cancel", "retry", "unlock",
                                           "no_such_action"]),
       run=st.sampled_from(["live", "unknown"]), with_csrf=st.booleans(),
       logged_in=st.booleans())
# digits that str.isdigit() admits and int() refuses, and one too long for int()
@example(form={"expect_epoch": "\u00b9"}, action="approve", run="live", with_csrf=True,
         logged_in=True)
@example(form={"expect_epoch": "9" * 5000}, action="approve", run="live", with_csrf=True,
         logged_in=True)
async def test_hostile_dashboard_forms_are_never_a_500(
    asgi: ASGIApp, store: stead.Store, form: dict[str, str], action: str, run: str,
    with_csrf: bool, logged_in: bool,
) -> None:
    client, live = await _live(store, "order-f")
    run_id = live.run_id if run == "live" else "nope"
    async with _http(asgi, _fresh_source()) as http:
        if logged_in:
            assert (await _log_in(http)).status_code == 303
        csrf = _csrf((await http.get("/login")).text)
        data = {k: v.encode("utf-8", "replace").decode() for k, v in form.items()}
        if with_csrf:
            data["csrf"] = csrf
        shown: list[httpx.Response] = [
            await http.post("/login", data=data),
            await http.post(f"/runs/{run_id}/actions/{action}", data=data),
        ]
        for r in shown:
            assert r.status_code < 500 and "Traceback" not in r.text, (r.status_code, r.text)
    # nobody logged in, or no page drawn to act from: the run did not move
    if not logged_in or not with_csrf:
        assert (await client.get(live.run_id)).status == RunStatus.WAITING
        assert await client.events(live.run_id) == []

