"""End-user stream tokens (`stead.stream_tokens`), on both stores: a token
opens its run's stream (or its one stream) on the dashboard's SSE route with
no login, resumes from Last-Event-ID, and nothing else; expired, revoked,
tampered and misplaced tokens get 401/403 with nothing of any run in the
answer; the token never reaches the server's access log."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import httpx
import pytest

import stead
from stead.clock import FakeClock
from stead.keys import Keyring
from stead.stream_tokens import tokens
from stead.web import create_app
from stead.web.edge import TOKEN_KEY, take_token
from tests.web_app import UI_TOKEN, serving

app = stead.App("tokens")


@app.workflow(version=1)
async def chat(run: stead.Run, question: str) -> str:
    answer = run.stream("answer")
    for word in ("You", "asked:", question):
        await answer.append(word)
    await answer.close()
    await run.stream("notes").append("private")
    return question


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def _answered(store: stead.Store, question: str = "hi") -> str:
    info = await stead.Client(store, app).start(chat, question)
    await stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01)).run_until_idle()
    return info.run_id


async def _events(http: httpx.AsyncClient, url: str,
                  headers: dict[str, str] | None = None) -> list[tuple[str, str, str]]:
    """(id, event, data) of each event, to the end of the response."""
    got: list[tuple[str, str, str]] = []
    async with http.stream("GET", url, headers=headers or {}) as r:
        assert r.status_code == 200, await r.aread()
        assert r.headers["access-control-allow-origin"] == "*"
        block: dict[str, str] = {}
        async for line in r.aiter_lines():
            if line:
                field, _, value = line.partition(": ")
                block[field] = value
            elif "id" in block:
                got.append((block["id"], block["event"], block["data"]))
                block = {}
    return got


def test_a_token_is_signed_read_back_and_judged() -> None:
    ring = Keyring.from_secret("s" * 32)
    minted = tokens.mint(ring, "run-1", "answer", now=1000.0, ttl=60)
    assert minted.text not in repr(minted)
    claims = tokens.read(ring, minted.text)
    assert isinstance(claims, tokens.Claims) and claims == minted.claims
    assert tokens.judge(claims, "run-1", "answer", 1010.0, revoked=False) is None
    assert tokens.judge(claims, "run-1", "notes", 1010.0, revoked=False) == tokens.ELSEWHERE
    assert tokens.judge(claims, "run-2", "answer", 1010.0, revoked=False) == tokens.ELSEWHERE
    assert tokens.judge(claims, "run-1", "answer", 1060.0, revoked=False) == tokens.EXPIRED
    assert tokens.judge(claims, "run-1", "answer", 1010.0, revoked=True) == tokens.REVOKED
    assert tokens.token_id(minted.text) == minted.token_id
    # Tampered claims, another key, another kind of token, junk: all one answer.
    prefix, kid, body, mac = minted.text.split(".")
    other = tokens.mint(ring, "run-2", None, now=1000.0, ttl=60).text.split(".")[2]
    for bad in (f"{prefix}.{kid}.{other}.{mac}", f"{prefix}.{kid}.{body}.{mac[:-2]}AA",
                tokens.mint(Keyring.from_secret("t" * 32), "run-1", None, 1000.0).text,
                "stk1." + minted.text[5:], "", "x" * 5000, "sst1.a.b", "sst1.\u00e9.b.c"):
        assert tokens.read(ring, bad) == tokens.INVALID
    # A revoked key's tokens no longer verify.
    revoked = dataclasses.replace(ring, revoked=frozenset({kid}))
    assert tokens.read(revoked, minted.text) == tokens.INVALID
    for ttl in (0, -1, float("nan"), tokens.MAX_TTL + 1):
        with pytest.raises(stead.InvalidInput):
            tokens.mint(ring, "run-1", None, 1000.0, ttl)


def test_the_edge_takes_the_token_out_of_the_query_string_in_place() -> None:
    scope = {"type": "http", "query_string": b"after=3&token=sst1.k.b.m"}
    take_token(scope)
    assert scope["query_string"] == b"after=3" and scope[TOKEN_KEY] == "sst1.k.b.m"
    twice = {"type": "http", "query_string": b"token=a&token=b"}
    take_token(twice)
    assert twice["query_string"] == b"" and TOKEN_KEY not in twice


async def test_a_token_reads_its_stream_without_a_login_and_nothing_else(
    store: stead.Store, db_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    run_id = await _answered(store, "why")
    other = await _answered(store, "secret")
    client = stead.Client(store, app)
    token = await client.stream_token(run_id, ttl=600, stream="answer")
    with pytest.raises(stead.UnknownRun):
        await client.stream_token("no-such-run")
    base = f"/runs/{run_id}/streams/answer"
    caplog.set_level(logging.INFO)
    access = _Kept()
    with serving(create_app(app, db_url=db_url, token=UI_TOKEN)) as url:
        # The server's access log, on (`serving` leaves it at warnings only).
        uvicorn_access = logging.getLogger("uvicorn.access")
        uvicorn_access.setLevel(logging.INFO)
        uvicorn_access.addHandler(access)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            got = await _events(http, f"{base}?{token.query()}")
            assert [(i, k) for i, k, _ in got] == [("1", "value"), ("2", "value"),
                                                   ("3", "value"), ("4", "closed")]
            assert '"why"' in got[2][2]
            # Reconnecting with Last-Event-ID gets only what came after it.
            rest = await _events(http, f"{base}?{token.query()}", {"Last-Event-ID": "2"})
            assert [i for i, _, _ in rest] == ["3", "4"]
            # Another stream of the run, another run, any other route: refused.
            for path, status in ((f"/runs/{run_id}/streams/notes", 403),
                                 (f"/runs/{other}/streams/answer", 403),
                                 ("/runs/nothing-here/streams/answer", 403)):
                r = await http.get(f"{path}?{token.query()}")
                assert r.status_code == status and "secret" not in r.text
                assert other not in r.text
            for path in ("/", "/runs", f"/runs/{run_id}", "/attention",
                         f"/runs/{run_id}/trace", "/status"):
                r = await http.get(f"{path}?{token.query()}")
                assert r.status_code == 401 and "why" not in r.text, path
            # No token, or a tampered one: 401, nothing of the run.
            assert (await http.get(base)).status_code == 401
            tampered = token.text[:-3] + ("AAA" if not token.text.endswith("AAA") else "BBB")
            r = await http.get(f"{base}?token={tampered}")
            assert r.status_code == 401 and "not a valid stream token" in r.text
            # Revoked: 403 from then on.
            assert await client.revoke_stream_token(token) == token.token_id
            r = await http.get(f"{base}?{token.query()}")
            assert r.status_code == 403 and "revoked" in r.text
            # Every token of a run at once.
            whole = await client.stream_token(run_id)
            assert len(await _events(http, f"/runs/{run_id}/streams/notes?{whole.query()}")) == 1
            await client.revoke_stream_tokens(run_id)
            r = await http.get(f"/runs/{run_id}/streams/notes?{whole.query()}")
            assert r.status_code == 403
    uvicorn_access.removeHandler(access)
    assert any(base in line for line in access.lines)  # the access log did log the reads
    # Everything the server side logged (the test's own HTTP client logs the
    # URLs it asks for: that is the browser's side, not the server's).
    logged = "\n".join([r.getMessage() for r in caplog.records
                        if not r.name.startswith(("httpx", "httpcore"))] + access.lines)
    assert token.text not in logged and tampered not in logged and whole.text not in logged


async def test_an_expired_token_is_refused(db_url: str) -> None:
    clock = FakeClock(1_000_000.0)
    store = await stead.open_store(db_url, clock=clock)
    try:
        run_id = await _answered(store)
        token = await stead.Client(store, app).stream_token(run_id, ttl=30)
        clock.advance(31)
        refused = await stead.Client(store, app).check_stream_token(token.text, run_id, "answer")
        assert refused == tokens.EXPIRED
    finally:
        await store.close()


async def test_the_stream_route_answers_a_token_on_both_stores_under_load(
    store: stead.Store, db_url: str,
) -> None:
    run_ids = [await _answered(store, f"q{i}") for i in range(3)]
    client = stead.Client(store, app)
    minted = [await client.stream_token(r, stream="answer") for r in run_ids]
    with serving(create_app(app, db_url=db_url, token=UI_TOKEN)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            read = await asyncio.gather(*(
                _events(http, f"/runs/{r}/streams/answer?{t.query()}")
                for r, t in zip(run_ids, minted, strict=True)))
    for i, got in enumerate(read):
        assert f'"q{i}"' in got[2][2]


async def test_stead_streams_revoke_takes_tokens_back(db_url: str) -> None:
    from click.testing import CliRunner

    from stead.cli import main

    def revoke(*args: str, stdin: str | None = None) -> str:
        done = CliRunner().invoke(main, ["--db", db_url, "streams", "revoke", *args],
                                  input=stdin)
        assert done.exit_code == 0, done.output
        return str(done.output)

    store = await stead.open_store(db_url)
    try:
        run_id = await _answered(store)
        client = stead.Client(store, app)
        by_id, by_text, by_run = [await client.stream_token(run_id) for _ in range(3)]
        # The command runs its own event loop: in a thread of its own here.
        assert by_id.token_id in await asyncio.to_thread(revoke, by_id.token_id)
        await asyncio.to_thread(revoke, "-", stdin=by_text.text)
        assert "every stream token" in await asyncio.to_thread(revoke, "--run", run_id)
        for token in (by_id, by_text, by_run):
            assert await client.check_stream_token(token.text, run_id, "answer") \
                == tokens.REVOKED
        bare = CliRunner().invoke(main, ["--db", db_url, "streams", "revoke"])
        assert bare.exit_code != 0 and "--run RUN" in bare.output
    finally:
        await store.close()
