"""Payloads sealed at rest, on both stores: a run whose input, model call,
step, event, stream and task state carry an e-mail address and a card-like
number leaves neither in the database files, in `pg_dump`, or in an export,
while the client, `stead runs show` and the store's reads still see them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import stead
from stead import payloads
from stead.records import RunStatus
from tests import pg

EMAIL = "alice@example.com"
CARD = "4111 1111 1111 1111"
SECRETS = (EMAIL.encode(), CARD.encode(), b"4111111111111111")


@pytest.fixture(autouse=True)
def data_keys(request: pytest.FixtureRequest, tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> None:
    """A PostgreSQL test's own key file, with a data key (an SQLite file
    makes its own beside it)."""
    if "db_url" in request.fixturenames and request.getfixturevalue("backend") == "postgres":
        request.getfixturevalue("db_url")
        path = tmp_path / "keys"
        stead.keys.add_key(path)
        stead.keys.rotate(path)
        monkeypatch.setenv(stead.keys.KEY_FILE_ENV, str(path))


def _app(model: stead.ScriptedModel) -> tuple[stead.App, Any]:
    app = stead.App("sealed")

    @app.workflow(version=1)
    async def serve(run: stead.Run, customer: dict[str, str]) -> dict[str, Any]:
        reply = await run.llm("ask", model, [
            {"role": "user", "content": f"I am {customer['email']}, card {customer['card']}"}])

        async def charge() -> str:
            return f"charged {customer['card']} for {customer['email']}"

        charged = await run.step("charge", charge)
        notes = run.stream("notes")
        await notes.append({"note": f"spoke with {customer['email']}"})
        await run.state.update({"email": customer["email"]}, expect_version=None)
        w: Any = await run.wait("confirm", token=False, request={"ask": customer["email"]})
        event = await w
        return {"reply": reply.text, "charged": charged, "event": event}

    return app, serve


def _grep(data: bytes) -> list[bytes]:
    return [s for s in SECRETS if s in data]


async def _serve(url: str, **options: Any) -> tuple[str, Any]:
    model = stead.ScriptedModel([f"hello {EMAIL}"])
    app, serve = _app(model)
    store = await stead.open_store(url, **options)
    try:
        client = stead.Client(store, app)
        info = await client.start(serve, {"email": EMAIL, "card": CARD}, task_id="cust-1")
        await stead.Worker(app, store).run_until_idle()
        await client.deliver(info.run_id, event_id="e1", kind="confirm",
                             payload={"ok": EMAIL})
        await stead.Worker(app, store).run_until_idle()
        result = await client.result(info.run_id, timeout=10)
    finally:
        await store.close()
    return info.run_id, result


def _export(run_id: str, env: dict[str, str]) -> bytes:
    done = subprocess.run([sys.executable, "-m", "stead", "runs", "export", run_id],
                          capture_output=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_nothing_personal_is_stored_in_clear(db_url: str, backend: str,
                                                   tmp_path: Path) -> None:
    run_id, result = await _serve(db_url, payloads=True)
    assert result["charged"] == f"charged {CARD} for {EMAIL}"
    assert result["event"] == {"ok": EMAIL}
    assert EMAIL in result["reply"]
    if backend == "sqlite":
        path = Path(db_url.removeprefix("sqlite:///"))
        found = [(p.name, _grep(p.read_bytes())) for p in path.parent.glob(path.name + "*")
                 if not p.name.endswith(".keys")]
        assert found and all(not hits for _, hits in found), found
    else:
        schema = pg.query_param(db_url, "schema")
        dump = subprocess.run(["pg_dump", "--data-only", f"--schema={schema}", pg.URL],
                              capture_output=True, timeout=120)
        assert dump.returncode == 0, dump.stderr
        assert b"payload_keys" in dump.stdout
        assert not _grep(dump.stdout)
    env = {**os.environ, "STEAD_ENCRYPT": "1", "STEAD_DATABASE_URL": db_url}
    exported = _export(run_id, env)
    assert not _grep(exported)
    # Who may see payloads still sees them.
    store = await stead.open_store(db_url, payloads=True)
    try:
        run = await store.get_run(run_id)
        assert EMAIL in run.input and CARD in run.input
        journal = await store.load_journal(run_id)
        assert any(EMAIL in r.payload for r in journal)
        state = await store.read_state("cust-1")
        assert state is not None and EMAIL in state.data
    finally:
        await store.close()
    shown = subprocess.run([sys.executable, "-m", "stead", "runs", "show", run_id],
                           capture_output=True, text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert EMAIL in shown.stdout


async def test_encryption_off_stores_as_before(sqlite_url: str) -> None:
    await _serve(sqlite_url, payloads=False)
    path = Path(sqlite_url.removeprefix("sqlite:///"))
    assert EMAIL.encode() in b"".join(p.read_bytes() for p in path.parent.glob("stead.db*"))


async def _waiting(store: stead.Store) -> tuple[stead.Client, str]:
    """A run of task cust-1 that went through the model, the step and the
    stream and now waits for its event."""
    app, serve = _app(stead.ScriptedModel([f"hello {EMAIL}"]))
    client = stead.Client(store, app)
    info = await client.start(serve, {"email": EMAIL, "card": CARD}, task_id="cust-1")
    await stead.Worker(app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == RunStatus.WAITING
    return client, info.run_id


@pytest.mark.parametrize("sealed", [True, False], ids=["encrypted", "clear"])
async def test_forget_erases_a_task_and_keeps_its_audit(db_url: str, sealed: bool) -> None:
    store = await stead.open_store(db_url, payloads=sealed)
    try:
        client, run_id = await _waiting(store)
        before = await store.load_journal(run_id)
        exported = (await store.seal_export(await client.export_run(run_id))).to_json()
        done = await client.forget("cust-1", why="erasure request 42", by="dpo")
        assert (done.runs, done.ended, done.keys_destroyed) == ((run_id,), (run_id,), sealed)
        run = await store.get_run(run_id)
        assert run.status == RunStatus.FAILED
        assert payloads.is_forgotten(run.input)
        assert "RunForgotten" in (run.error or "") and "dpo" in (run.error or "")
        after = await store.load_journal(run_id)
        # The skeleton stays: the same records, by address, kind, name, status and time.
        assert [(r.seq, r.addr, r.kind, r.name, r.status, r.at) for r in after] == \
            [(r.seq, r.addr, r.kind, r.name, r.status, r.at) for r in before]
        assert all(payloads.is_forgotten(r.payload) for r in after)
        assert await store.read_state("cust-1") is None
        gone = await store.forgotten(run_id)
        assert gone is not None and (gone.by, gone.why, gone.task_id) == (
            "dpo", "erasure request 42", "cust-1")
        for refused in (client.fork(run_id), client.retry(run_id),
                        client.resume(run_id, by="ops", why="go on")):
            with pytest.raises(stead.errors.RunForgotten, match="dpo"):
                await refused
        if sealed:
            # A copy sealed before (an export, a backup's rows) opens no more.
            opened = await store.open_export(exported)
            assert payloads.is_forgotten(opened["run"]["input"])
            assert all(payloads.is_forgotten(r["payload"]) for r in opened["journal"])
    finally:
        await store.close()
    if db_url.startswith("sqlite"):
        path = Path(db_url.removeprefix("sqlite:///"))
        data = b"".join(p.read_bytes() for p in path.parent.glob("stead.db*")
                        if not p.name.endswith(".keys"))
        # Overwritten in place; SQLite may keep old pages until they are reused.
        assert b'"$forgotten"' in data


async def test_the_pages_show_payloads_then_say_who_forgot_them(db_url: str) -> None:
    import httpx

    from stead.web import create_app
    from tests.test_web import BASE, _log_in
    from tests.web_app import UI_TOKEN

    store = await stead.open_store(db_url, payloads=True)
    try:
        app, _ = _app(stead.ScriptedModel([]))
        client, run_id = await _waiting(store)
        asgi = create_app(app, store=store, token=UI_TOKEN)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                     base_url=BASE) as web:
            await _log_in(web)
            assert EMAIL in (await web.get(f"/runs/{run_id}")).text
            await client.forget("cust-1", why="erasure request 42", by="dpo")
            shown = (await web.get(f"/runs/{run_id}")).text
        assert 'id="forgotten"' in shown and "dpo" in shown and "erasure request 42" in shown
        assert EMAIL not in shown and CARD not in shown
    finally:
        await store.close()
    env = {**os.environ, "STEAD_ENCRYPT": "1", "STEAD_DATABASE_URL": db_url}
    printed = subprocess.run([sys.executable, "-m", "stead", "runs", "show", run_id],
                             capture_output=True, text=True, env=env, timeout=120)
    assert printed.returncode == 0, printed.stderr
    assert "forgotten by dpo" in printed.stdout and EMAIL not in printed.stdout
