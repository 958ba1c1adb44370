"""The payload codec: AES-256-GCM seals bound to where a value lives, data
keys wrapped by the keyring's data keys; tampering, moving a value, a
missing key and rotation, in memory and through a store."""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import stead
from stead import errors, keys
from stead.payloads import KeyringCodec, Sealer, What, Where, envelope, is_sealed

RING = keys.Keyring((keys.new_key(),), data_keys=(keys.new_key(),))
SEALER = Sealer(KeyringCodec(RING))
KEY, _ = SEALER.new_key("run-1")
HERE = Where("run-1", What.JOURNAL)


@given(st.text())
def test_a_sealed_value_opens_to_itself_and_shows_nothing(text: str) -> None:
    sealed = SEALER.seal(text, HERE, KEY)
    assert is_sealed(sealed) and json.loads(sealed)["s"] == "run-1"
    assert SEALER.unseal(sealed, HERE, KEY) == text
    if len(text) > 3:
        assert text not in sealed


@given(st.data())
def test_any_changed_byte_is_refused(data: st.DataObject) -> None:
    sealed = SEALER.seal('{"card": "4111 1111 1111 1111"}', HERE, KEY)
    parts = json.loads(sealed)
    blob = bytearray(base64.b64decode(parts["d"]))
    i = data.draw(st.integers(0, len(blob) - 1))
    blob[i] ^= data.draw(st.integers(1, 255))
    parts["d"] = base64.b64encode(bytes(blob)).decode()
    with pytest.raises(errors.PayloadUnreadable, match="changed"):
        SEALER.unseal(json.dumps(parts), HERE, KEY)


@pytest.mark.parametrize("elsewhere", [Where("run-2", What.JOURNAL), Where("run-1", What.INPUT)])
def test_a_value_moved_to_another_place_is_refused(elsewhere: Where) -> None:
    sealed = SEALER.seal('"alice@example.com"', HERE, KEY)
    with pytest.raises(errors.PayloadUnreadable, match="moved"):
        SEALER.unseal(sealed, elsewhere, KEY)
    # Rewriting the place it names does not help: the place is sealed in.
    forged = json.dumps({**json.loads(sealed), "w": str(elsewhere.what),
                         "s": elsewhere.scope})
    other = KEY if elsewhere.scope == KEY.scope else SEALER.new_key(elsewhere.scope)[0]
    with pytest.raises(errors.PayloadUnreadable):
        SEALER.unseal(forged, elsewhere, other)


def test_a_malformed_or_unknown_seal_is_refused() -> None:
    with pytest.raises(errors.PayloadUnreadable, match="malformed"):
        SEALER.unseal('{"$sealed": "aesgcm1", "s": "run-1"}', HERE, KEY)
    with pytest.raises(errors.PayloadUnreadable, match="does not know"):
        SEALER.unseal('{"$sealed": "rot13", "s": "run-1", "w": "journal", "d": ""}', HERE, KEY)


def test_a_missing_key_is_named() -> None:
    key, wrapped = SEALER.new_key("run-3")
    other = Sealer(KeyringCodec(keys.Keyring((keys.new_key(),), data_keys=(keys.new_key(),))))
    with pytest.raises(errors.PayloadKeyMissing, match=wrapped.key_id) as caught:
        other.open_key("run-3", wrapped)
    assert caught.value.key_id == wrapped.key_id
    assert SEALER.open_key("run-3", wrapped) == key
    with pytest.raises(errors.PayloadUnreadable, match="moved from another scope"):
        SEALER.open_key("run-4", wrapped)  # a wrapped key moved to another run


def test_rotation_wraps_with_the_newest_and_unwraps_the_older() -> None:
    _, old = SEALER.new_key("run-5")
    newer = keys.new_key()
    rotated = Sealer(KeyringCodec(keys.Keyring(RING.keys, data_keys=(*RING.data_keys, newer))))
    assert rotated.codec.newest() == newer.id
    assert rotated.open_key("run-5", old).secret == SEALER.open_key("run-5", old).secret
    _, fresh = rotated.new_key("run-6")
    assert fresh.key_id == newer.id


def test_the_key_file_keeps_data_keys_apart_from_signing_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    signing = keys.add_key(path)
    first, second = keys.rotate(path), keys.rotate(path)
    ring = keys.read_file(path)
    assert [k.id for k in ring.keys] == [signing.id]
    assert [k.id for k in ring.data_keys] == [first.id, second.id]
    assert ring.current_data == second and ring.current.id == signing.id
    keys.revoke(path, signing.id)  # revoking a signing key keeps the data keys
    assert keys.read_file(path).data_keys == ring.data_keys
    with pytest.raises(errors.KeysUnavailable, match="stead keys rotate"):
        _ = keys.Keyring((signing,)).current_data


async def _store(url: str, *data_keys: keys.Key) -> stead.Store:
    return await stead.open_store(url, keys=keys.Keyring(RING.keys, data_keys=data_keys),
                                  payloads=True)


async def _start(store: stead.Store, n: int) -> list[str]:
    app = stead.App("codec")

    @app.workflow(version=1)
    async def hold(run: stead.Run, who: str) -> str:
        return who

    client = stead.Client(store, app)
    return [(await client.start(hold, f"alice{i}@example.com")).run_id for i in range(n)]


async def test_reading_without_the_data_key_names_it(db_url: str) -> None:
    k1 = keys.new_key()
    store = await _store(db_url, k1)
    [run_id] = await _start(store, 1)
    await store.close()
    store = await _store(db_url, keys.new_key())
    try:
        with pytest.raises(errors.PayloadKeyMissing, match=k1.id):
            await store.get_run(run_id)
    finally:
        await store.close()


async def test_a_value_swapped_between_rows_is_refused(sqlite_url: str) -> None:
    store = await _store(sqlite_url, keys.new_key())
    first, second = await _start(store, 2)
    await store.close()
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        db.execute("UPDATE runs SET input = (SELECT input FROM runs WHERE run_id = ?) "
                   "WHERE run_id = ?", (second, first))
    store = await _store(sqlite_url, RING.data_keys[0])
    try:
        with pytest.raises(errors.PayloadUnreadable, match="moved between rows"):
            await store.get_run(first)
    finally:
        await store.close()


async def test_rewrapping_moves_every_key_to_the_newest_in_batches(db_url: str) -> None:
    k1, k2 = keys.new_key(), keys.new_key()
    store = await _store(db_url, k1)
    run_ids = await _start(store, 7)
    await store.close()
    store = await _store(db_url, k1, k2)
    try:
        assert await store.payload_key_counts() == {k1.id: 7}
        assert await _rewrap_pass(store, limit=3) == (7, 3)
        assert await store.payload_key_counts() == {k2.id: 7}
    finally:
        await store.close()
    store = await _store(db_url, k2)  # the old key retired: every run still reads
    try:
        for i, run_id in enumerate(run_ids):
            assert f"alice{i}@example.com" in (await store.get_run(run_id)).input
    finally:
        await store.close()


async def _rewrap_pass(store: stead.Store, limit: int,
                       between: Callable[[], Awaitable[object]] | None = None) -> tuple[int, int]:
    """One re-encryption pass, as `stead keys reencrypt` makes it (with
    `between` awaited after each batch): the keys it rewrapped, its batches."""
    done, after, began, batches = 0, "", None, 0
    while True:
        batch = await store.rewrap_keys(after, limit=limit, began=began)
        if batch.last is None:
            return done, batches
        done, after, began, batches = done + batch.done, batch.last, batch.began, batches + 1
        if between is not None:
            await between()


async def test_a_rewrapping_pass_ends_beside_writers_wrapping_with_the_older_key(
        db_url: str) -> None:
    """Workers not yet restarted with the new key file wrap new keys with the
    older one, faster than a pass of one key a batch rewraps: the pass still
    ends, with the keys made before it under the newest; the next takes the rest."""
    k1, k2 = keys.new_key(), keys.new_key()
    old = await _store(db_url, k1)
    new = await _store(db_url, k1, k2)
    try:
        await _start(old, 4)

        batches = 0

        async def two_more() -> None:
            nonlocal batches
            batches += 1
            assert batches <= 4, "the pass chases the keys made during it"
            await asyncio.sleep(0.005)  # past the pass's start on SQLite's millisecond clock
            await _start(old, 2)

        assert await _rewrap_pass(new, limit=1, between=two_more) == (4, 4)
        assert await new.payload_key_counts() == {k1.id: 8, k2.id: 4}
        assert await _rewrap_pass(new, limit=5) == (8, 2)  # the workers restarted
        assert await new.payload_key_counts() == {k2.id: 12}
    finally:
        await old.close()
        await new.close()


def test_the_envelope_is_json_a_column_of_either_store_takes() -> None:
    sealed = SEALER.seal("x", HERE, KEY)
    assert sealed.startswith(envelope.PREFIX)
    assert json.loads(sealed)["$sealed"] == envelope.SCHEME


class _Kms:
    """A key service stand-in: wraps with a key of its own, by the given context."""

    def __init__(self) -> None:
        self.key = keys.new_key()
        self.wrapped = 0

    def newest(self) -> str:
        return "kms-1"

    def wrap(self, data_key: bytes, context: bytes) -> stead.payloads.WrappedKey:
        from stead.payloads import codec

        self.wrapped += 1
        return stead.payloads.WrappedKey("kms-1", codec.aes_seal(self.key.secret, data_key,
                                                                  context))

    def unwrap(self, wrapped: stead.payloads.WrappedKey, context: bytes) -> bytes:
        from stead.payloads import codec

        if wrapped.key_id != "kms-1":
            raise errors.PayloadKeyMissing(wrapped.key_id)
        plain = codec.aes_open(self.key.secret, wrapped.blob, context)
        if plain is None:
            raise errors.PayloadUnreadable("the key service refused it")
        return plain


async def test_a_codec_of_ones_own_wraps_the_keys(sqlite_url: str) -> None:
    kms = _Kms()
    store = await stead.open_store(sqlite_url, payloads=kms)
    try:
        [run_id] = await _start(store, 1)
        assert kms.wrapped == 1 and await store.payload_key_counts() == {"kms-1": 1}
        assert "alice0@example.com" in (await store.get_run(run_id)).input
    finally:
        await store.close()
    with pytest.raises(errors.StoreError, match="PayloadCodec"):
        await stead.open_store(sqlite_url, payloads="yes")  # type: ignore[arg-type]
