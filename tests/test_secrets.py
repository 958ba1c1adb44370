"""Secrets: wait tokens signed by keys kept outside the database, never
journaled in clear, database files readable by their owner only, passwords
masked on screens, tokens kept out of `ps` and shell history."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import sqlite3
import stat
import sys
import urllib.parse
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
from click.testing import CliRunner

import stead
import stead.keys
from stead.cli import main
from stead.store import display_url
from stead.workflow.waits import sign, token_hash, token_refusal
from tests import pg

Body = Callable[[stead.Run, list[str]], Coroutine[Any, Any, Any]]


@pytest.fixture
def own_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key from the environment: the default sources are what is tested."""
    monkeypatch.delenv(stead.keys.SECRET_ENV, raising=False)
    monkeypatch.delenv(stead.keys.KEY_FILE_ENV, raising=False)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _database_bytes(db: Path) -> bytes:
    """Everything SQLite keeps for the database: the file, its WAL, its -shm."""
    return b"".join(p.read_bytes() for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"))
                    if p.exists())


async def _shown(db: Path, run_id: str) -> str:
    """`stead runs show RUN --json`, as an operator would read it."""
    shown = await asyncio.to_thread(CliRunner().invoke, main, [
        "--db", f"sqlite:///{db}", "runs", "show", run_id, "--json"])
    assert shown.exit_code == 0, (shown.output, shown.exception)
    return str(shown.output)


# -- a waiting run whose token a person received ------------------------------------------
def _approval_app(sent: list[str]) -> stead.App:
    app = stead.App("approvals")

    def send(op: stead.Operation, token: stead.Token) -> None:
        sent.append(token.reveal())  # inside the effect: the one place it comes out

    @app.workflow()
    async def confirm(run: stead.Run) -> Any:
        w = await run.wait("confirm")
        await run.effect("send", send, w.token)
        return await w

    return app


async def _waiting(store: stead.Store, app: stead.App, sent: list[str]) -> tuple[str, str, str]:
    """Start a run, let it wait; its run id, wait id and the token sent out."""
    client = stead.Client(store, app)
    info = await client.start("confirm")
    before = len(sent)
    await stead.Worker(app, store).run_until_idle()
    [w] = await client.waits(run_id=info.run_id)
    assert len(sent) == before + 1
    return info.run_id, w.wait_id, sent[-1]


async def _deliver(store: stead.Store, run_id: str, wait_id: str, token: str) -> stead.Delivery:
    return await stead.Client(store).deliver(run_id, wait_id=wait_id, token=token,
                                             event_id=uuid.uuid4().hex, payload={"ok": True})


# -- keys outside the database ------------------------------------------------------------
@pytest.mark.sqlite_only
async def test_database_and_key_file_are_private_and_the_key_is_not_in_the_database(
    own_keys: None, tmp_path: Path,
) -> None:
    db = tmp_path / "stead.db"
    store = await stead.open_store(f"sqlite:///{db}")
    try:
        sent: list[str] = []
        _run_id, _wait_id, token = await _waiting(store, _approval_app(sent), sent)
        assert token.startswith("stk1.")
        key_file = tmp_path / "stead.db.keys"
        assert _mode(key_file) == 0o600
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            assert _mode(path) == 0o600, path
        [key] = stead.keys.read_file(key_file).keys
        everything = _database_bytes(db)
        assert key.secret.hex().encode() not in everything and key.secret not in everything
        assert token.encode() not in everything
    finally:
        await store.close()


@pytest.mark.sqlite_only
async def test_a_token_minted_from_a_copy_of_the_database_alone_is_rejected(
    own_keys: None, tmp_path: Path,
) -> None:
    (tmp_path / "live").mkdir()
    (tmp_path / "stolen").mkdir()
    db = tmp_path / "live" / "stead.db"
    store = await stead.open_store(f"sqlite:///{db}")
    try:
        sent: list[str] = []
        run_id, wait_id, token = await _waiting(store, _approval_app(sent), sent)
        for suffix in ("", "-wal", "-shm"):  # the file as a reader of the disk gets it
            if Path(f"{db}{suffix}").exists():
                shutil.copy(f"{db}{suffix}", tmp_path / "stolen" / f"stead.db{suffix}")
        copy = await stead.open_store(f"sqlite:///{tmp_path}/stolen/stead.db")
        try:
            # All a thief can sign with: whatever the copy yields (no key is in it).
            forged = [sign(k, run_id, wait_id) for k in (await copy.keyring()).keys]
            assert not (await copy.keyring()).legacy
        finally:
            await copy.close()
        for attempt in forged:
            verdict = await _deliver(store, run_id, wait_id, attempt)
            assert isinstance(verdict, stead.Rejected) and verdict.reason == "bad_token"
        assert isinstance(await _deliver(store, run_id, wait_id, token), stead.Accepted)
    finally:
        await store.close()


async def test_rotation_old_tokens_verify_until_their_key_is_revoked(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    key_file = tmp_path / "rotating.keys"
    first = stead.keys.add_key(key_file)
    monkeypatch.delenv(stead.keys.SECRET_ENV, raising=False)
    monkeypatch.setenv(stead.keys.KEY_FILE_ENV, str(key_file))
    store = await stead.open_store(db_url)
    try:
        sent: list[str] = []
        app = _approval_app(sent)
        r1, w1, t1 = await _waiting(store, app, sent)
        r2, w2, t2 = await _waiting(store, app, sent)
        second = stead.keys.add_key(key_file)  # rotate: new tokens use the new key
        r3, w3, t3 = await _waiting(store, app, sent)
        assert first.id in t1 and first.id in t2 and second.id in t3
        assert isinstance(await _deliver(store, r1, w1, t1), stead.Accepted)

        stead.keys.revoke(key_file, first.id)
        refused = await _deliver(store, r2, w2, t2)
        assert isinstance(refused, stead.Rejected) and refused.reason == "bad_token"
        assert "revoked" in refused.detail and first.id in refused.detail
        assert isinstance(await _deliver(store, r3, w3, t3), stead.Accepted)
        assert first.secret.hex() not in key_file.read_text()  # a revoked key is dropped
    finally:
        await store.close()


@pytest.mark.sqlite_only
async def test_a_database_secret_from_before_is_a_legacy_key_until_revoked(
    own_keys: None, tmp_path: Path,
) -> None:
    db = tmp_path / "stead.db"
    store = await stead.open_store(f"sqlite:///{db}")
    await store.close()
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO stead_meta (key, value) VALUES ('secret', ?)", ("ab" * 32,))
    conn.commit()
    conn.close()
    store = await stead.open_store(f"sqlite:///{db}")
    try:
        ring = await store.keyring()
        assert ring.legacy == bytes.fromhex("ab" * 32)  # lent, to replay old waits
        assert ring.current.id != stead.keys.LEGACY  # new tokens never use it
        assert token_refusal(ring, "stk_oldtoken") is None
        stead.keys.revoke(tmp_path / "stead.db.keys", stead.keys.LEGACY)
        refusal = token_refusal(await store.keyring(), "stk_oldtoken")
        assert refusal is not None and "revoked" in refusal
    finally:
        await store.close()


@pytest.mark.sqlite_only
async def test_a_wait_signed_with_the_old_database_secret_verifies_and_replays(
    own_keys: None, tmp_path: Path,
) -> None:
    app = stead.App("legacy")
    sent: list[str] = []

    def send(op: stead.Operation, token: stead.Token) -> None:
        sent.append(token.reveal())

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        w = await run.wait("confirm")
        await run.effect("send", send, w.token)
        await w
        await run.effect("again", send, w.token)  # after the takeover: signed again
        return "done"

    db = tmp_path / "stead.db"
    store = await stead.open_store(f"sqlite:///{db}")
    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store).run_until_idle()
    [w] = await client.waits(run_id=info.run_id)
    await store.close()
    # Make the run what an older stead left: a token signed with the secret kept
    # in stead_meta, and a wait record that names no key.
    old = bytes.fromhex("cd" * 32)
    legacy = sign(stead.keys.Key(stead.keys.LEGACY, old), info.run_id, w.wait_id)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("INSERT INTO stead_meta (key, value) VALUES ('secret', ?)", (old.hex(),))
        conn.execute("UPDATE waits SET token_hash = ? WHERE wait_id = ?",
                     (token_hash(legacy), w.wait_id))
        [(seq, payload)] = conn.execute(
            "SELECT seq, payload FROM journal WHERE run_id = ? AND kind = 'wait'",
            (info.run_id,)).fetchall()
        opened = json.loads(payload)
        del opened["key"]
        conn.execute("UPDATE journal SET payload = ? WHERE run_id = ? AND seq = ?",
                     (json.dumps(opened), info.run_id, seq))
    conn.close()

    store = await stead.open_store(f"sqlite:///{db}")
    try:
        assert isinstance(await _deliver(store, info.run_id, w.wait_id, legacy), stead.Accepted)
        await stead.Worker(app, store).run_until_idle()
        assert await stead.Client(store).result(info.run_id, timeout=10) == "done"
        assert sent[-1] == legacy  # the replay signed the wait's token as it was
        assert legacy.encode() not in _database_bytes(db)
    finally:
        await store.close()


async def test_postgres_with_no_key_configured_refuses_to_make_one_up(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(stead.keys.SECRET_ENV, raising=False)
    monkeypatch.delenv(stead.keys.KEY_FILE_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    store = await stead.open_store(pg_url)
    try:
        with pytest.raises(stead.KeysUnavailable, match=r"STEAD_SECRET.*STEAD_KEY_FILE"):
            await store.keyring()
        monkeypatch.setenv(stead.keys.SECRET_ENV, "one secret for every machine")
        assert (await store.keyring()).current.id == stead.keys.key_id(
            b"one secret for every machine")
    finally:
        await store.close()


async def test_a_keys_hook_given_to_open_store_signs_and_checks(db_url: str) -> None:
    ring = stead.Keyring.from_secret("from my vault")
    store = await stead.open_store(db_url, keys=lambda: ring)
    try:
        sent: list[str] = []
        run_id, wait_id, token = await _waiting(store, _approval_app(sent), sent)
        assert ring.current.id in token
        assert isinstance(await _deliver(store, run_id, wait_id, token), stead.Accepted)
    finally:
        await store.close()


# -- the token's value never enters the journal ---------------------------------------------
@dataclasses.dataclass
class Carrier:
    order: str
    token: Any


class Page(pydantic.BaseModel):
    link: str


def _natural(run: stead.Run, w: stead.Wait[Any]) -> list[Coroutine[Any, Any, Any]]:
    """The ways a token's text used to reach the journal; none holds it now."""
    def noop(op: stead.Operation, *args: Any) -> None:
        return None

    return [
        run.effect("dataclass_arg", noop, Carrier("o-1", w.token)),
        run.effect("pydantic_arg", noop, Page(link=f"https://x.example/?t={w.token}")),
        run.step("str_token", lambda: str(w.token)),
        run.step("fstring_link", lambda: f"https://x.example/confirm?token={w.token}"),
        run.step("dict_key", lambda: {str(w.token): True}),
        run.state.update({"link": f"https://x.example/?t={w.token}"}, expect_version=None),
    ]


@pytest.mark.sqlite_only
async def test_the_natural_ways_to_write_a_token_down_never_write_its_value(
    own_keys: None, tmp_path: Path,
) -> None:
    app = stead.App("natural")
    sent: list[str] = []

    def send(op: stead.Operation, w: stead.Wait[Any]) -> None:
        sent.append(w.link("https://shop.example/confirm"))

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        w = await run.wait("confirm")
        assert "****" in str(w.token) and "****" in repr(w.token) and "****" in f"{w.token}"
        await run.effect("send", send, w)
        for call in _natural(run, w):
            await call
        return f"done {w.token}"

    db = tmp_path / "stead.db"
    store = await stead.open_store(f"sqlite:///{db}")
    try:
        client = stead.Client(store, app)
        info = await client.start(wf)
        await stead.Worker(app, store).run_until_idle()
        assert (await client.get(info.run_id)).status == "completed"
        [link] = sent
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(link).query)
        assert query["run"] == [info.run_id] and query["token"][0].startswith("stk1.")
        secret = query["token"][0]
        assert secret.encode() not in _database_bytes(db)
        shown = await _shown(db, info.run_id)
        assert "****" in shown and secret not in shown
    finally:
        await store.close()


def _smuggled(run: stead.Run, leaked: list[str]) -> dict[str, Callable[[], Any]]:
    """The revealed value carried out of the effect and handed to stead."""
    def noop(op: stead.Operation, *args: Any) -> None:
        return None

    return {
        "the arguments of effect 'notify'": lambda: run.effect(
            "notify", noop, Carrier("o-1", leaked[0])),
        "the arguments of effect 'page'": lambda: run.effect(
            "page", noop, Page(link=f"https://x.example/?t={leaked[0]}")),
        "the arguments of effect 'keyed'": lambda: run.effect(
            "keyed", noop, {leaked[0]: True}),
        "the result of step 'remember'": lambda: run.step("remember", lambda: leaked[0]),
        "the result of step 'link'": lambda: run.step(
            "link", lambda: f"https://x.example/confirm?token={leaked[0]}"),
        "the patch of run.state.update": lambda: run.state.update(
            {"link": f"https://x.example/?t={leaked[0]}"}, expect_version=None),
    }


SMUGGLED = [
    "the arguments of effect 'notify'", "the arguments of effect 'page'",
    "the arguments of effect 'keyed'", "the result of step 'remember'",
    "the result of step 'link'", "the patch of run.state.update",
    "the result of effect 'send'", "the result of workflow 'wf'",
]


@pytest.mark.sqlite_only
@pytest.mark.parametrize("call", SMUGGLED)
async def test_a_revealed_token_is_refused_wherever_it_would_be_journaled(
    own_keys: None, tmp_path: Path, call: str,
) -> None:
    app = stead.App("smuggle")
    leaked: list[str] = []

    def send(op: stead.Operation, token: stead.Token) -> str:
        leaked.append(token.reveal())
        return leaked[0] if call == "the result of effect 'send'" else "sent"

    @app.workflow()
    async def wf(run: stead.Run) -> Any:
        w = await run.wait("confirm")
        await run.effect("send", send, w.token)
        if call == "the result of workflow 'wf'":
            return {"link": leaked[0]}
        await _smuggled(run, leaked)[call]()
        return "stored"

    db = tmp_path / "stead.db"
    store = await stead.open_store(f"sqlite:///{db}")
    try:
        client = stead.Client(store, app)
        info = await client.start(wf)
        await stead.Worker(app, store).run_until_idle()
        run = await client.get(info.run_id)
        assert run.error is not None
        if call == "the result of effect 'send'":
            # The effect happened but its result cannot be stored: recorded as
            # unknown, and the run stops for a human instead of going on.
            assert run.status == "outcome_unknown", run
        else:
            assert run.status == "failed", run
            assert run.error["type"] == "SecretInJournal"
        assert call in run.error["message"], run.error["message"]
        [secret] = leaked
        assert secret.encode() not in _database_bytes(db)
        assert secret not in await _shown(db, info.run_id)
    finally:
        await store.close()


@pytest.mark.sqlite_only
async def test_an_effect_error_that_quotes_its_link_is_journaled_masked(
    own_keys: None, tmp_path: Path,
) -> None:
    app = stead.App("quoting")
    links: list[str] = []

    def send(op: stead.Operation, w: stead.Wait[Any]) -> None:
        links.append(w.link("https://mail.example/send"))
        raise RuntimeError(f"POST {links[0]} answered 500")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        w = await run.wait("confirm")
        try:
            await run.effect("send", send, w)
        except stead.EffectFailed as exc:
            return exc.message
        return "sent"

    db = tmp_path / "stead.db"
    store = await stead.open_store(f"sqlite:///{db}")
    try:
        client = stead.Client(store, app)
        info = await client.start(wf)
        await stead.Worker(app, store).run_until_idle()
        message = await client.result(info.run_id, timeout=10)
        assert "answered 500" in message and "token=****" in message
        token = urllib.parse.parse_qs(urllib.parse.urlsplit(links[0]).query)["token"][0]
        assert token not in message and token.encode() not in _database_bytes(db)
    finally:
        await store.close()


async def test_a_token_is_revealed_only_inside_an_effect(store: stead.Store) -> None:
    app = stead.App("reveal")
    seen: dict[str, Any] = {}

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        w = await run.wait("confirm")
        assert w.token is not None
        for name, reveal in (("reveal", w.token.reveal),
                             ("link", lambda: w.link("https://x.example"))):
            try:
                reveal()
            except stead.TokenHidden as exc:
                seen[name] = str(exc)
        seen["step"] = await run.step("peek", lambda: _tries(w.token))

    def _tries(token: Any) -> str:
        try:
            return str(token.reveal())
        except stead.TokenHidden:
            return "hidden in a step too"

    await stead.Client(store, app).start(wf)
    await stead.Worker(app, store).run_until_idle()
    assert "only inside an effect" in seen["reveal"] and "only inside an effect" in seen["link"]
    assert seen["step"] == "hidden in a step too"


async def test_an_event_that_carries_its_own_token_is_refused_and_not_stored(
    store: stead.Store,
) -> None:
    sent: list[str] = []
    run_id, wait_id, token = await _waiting(store, _approval_app(sent), sent)
    client = stead.Client(store)
    with pytest.raises(stead.SecretInJournal, match="the event payload"):
        await client.deliver(run_id, wait_id=wait_id, token=token, event_id="e1",
                             payload={"echo": f"token={token}"})
    assert await client.events(run_id) == []


# -- screens: passwords and tokens ------------------------------------------------------
def test_display_url_masks_every_password() -> None:
    assert display_url("postgresql://u:hunter2@db:5432/app?sslmode=require") == (
        "postgresql://u:***@db:5432/app?sslmode=require")
    assert "hunter2" not in display_url("postgresql://u@db/app?password=hunter2&x=1")
    assert display_url("sqlite:///stead.db") == "sqlite:///stead.db"
    assert display_url("postgresql://u@db/app") == "postgresql://u@db/app"


APP_SOURCE = '''
import stead

app = stead.App("shown")


@app.workflow()
async def hello(run):
    return "hi"
'''


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"secapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP_SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield name
    sys.modules.pop(name, None)


def test_migrate_and_the_worker_never_print_the_password(
    pg_keys: None, app_module: str,
) -> None:
    pg.require()
    with pg.fresh_schema() as url:
        parts = urllib.parse.urlsplit(url)
        user = parts.username or "postgres"
        # The server trusts local connections: any password gets in.
        secret_url = url.replace(f"{parts.scheme}://{parts.netloc}",
                                 f"{parts.scheme}://{user}:hunter2@{parts.hostname}:"
                                 f"{parts.port or 5432}", 1)
        assert "hunter2" in secret_url
        runner = CliRunner()
        migrated = runner.invoke(main, ["--db", secret_url, "db", "migrate"])
        assert migrated.exit_code == 0, migrated.output
        assert "hunter2" not in migrated.output and ":***@" in migrated.output
        worked = runner.invoke(main, ["--db", secret_url, "worker", f"{app_module}:app",
                                      "--until-idle"])
        assert worked.exit_code == 0, worked.output
        assert "started" in worked.output and "hunter2" not in worked.output


def _ran(result: Any) -> str:
    assert result.exit_code == 0, (result.output, result.exception)
    return str(result.output)


@pytest.mark.sqlite_only
def test_approve_reads_the_token_from_a_file_stdin_or_the_environment(
    own_keys: None, tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/stead.db"

    async def three() -> list[tuple[str, str, str]]:
        store = await stead.open_store(url)
        try:
            sent: list[str] = []
            app = _approval_app(sent)
            return [await _waiting(store, app, sent) for _ in range(3)]
        finally:
            await store.close()

    [(r1, w1, t1), (r2, w2, t2), (r3, w3, t3)] = asyncio.run(three())
    runner = CliRunner()
    token_file = tmp_path / "token"
    token_file.write_text(t1 + "\n")
    by_file = _ran(runner.invoke(main, ["--db", url, "approve", r1, "--wait", w1,
                                        "--token-file", str(token_file)]))
    by_stdin = _ran(runner.invoke(main, ["--db", url, "reject", r2, "--wait", w2,
                                         "--token", "-"], input=t2 + "\n"))
    by_env = _ran(runner.invoke(main, ["--db", url, "approve", r3, "--wait", w3],
                                env={"STEAD_TOKEN": t3}))
    for out in (by_file, by_stdin, by_env):
        assert out.startswith("Accepted")
    missing = runner.invoke(main, ["--db", url, "approve", r1, "--wait", w1],
                            env={"STEAD_TOKEN": ""})
    assert missing.exit_code == 1 and "--token-file" in missing.output
    helped = _ran(runner.invoke(main, ["approve", "--help"]))
    flat = " ".join(helped.split())
    assert "--token-file" in flat and "STEAD_TOKEN" in flat and "stdin" in flat
    assert "visible to other users" in flat


@pytest.mark.sqlite_only
def test_keys_commands_add_list_and_revoke(own_keys: None, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/stead.db"
    runner = CliRunner()
    added = _ran(runner.invoke(main, ["--db", url, "keys", "add"]))
    key_file = tmp_path / "stead.db.keys"
    assert _mode(key_file) == 0o600 and str(key_file) in added
    [first] = stead.keys.read_file(key_file).keys
    _ran(runner.invoke(main, ["--db", url, "keys", "add"]))
    listed = _ran(runner.invoke(main, ["--db", url, "keys", "ls"]))
    assert f"{first.id}  verifies" in listed and "signs new tokens" in listed
    _ran(runner.invoke(main, ["--db", url, "keys", "revoke", first.id]))
    assert f"{first.id}  revoked" in _ran(runner.invoke(main, ["--db", url, "keys", "ls"]))
    unknown = runner.invoke(main, ["--db", url, "keys", "revoke", "nope"])
    assert unknown.exit_code == 1 and "no key 'nope'" in unknown.output
    assert json.loads(key_file.read_text())["revoked"] == [first.id]
