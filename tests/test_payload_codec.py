"""The payload codec: AES-256-GCM seals bound to where a value lives, data
keys wrapped by the keyring's data keys; tampering, moving a value, a
missing key and rotation, in memory and through a store."""

from __future__ import annotations

import base64
import json
import sqlite3
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
        done, after, batches = 0, "", 0
        while True:
            n, last = await store.rewrap_keys(after, limit=3)
            if last is None:
                break
            done, after, batches = done + n, last, batches + 1
        assert (done, batches) == (7, 3)
        assert await store.payload_key_counts() == {k2.id: 7}
    finally:
        await store.close()
    store = await _store(db_url, k2)  # the old key retired: every run still reads
    try:
        for i, run_id in enumerate(run_ids):
            assert f"alice{i}@example.com" in (await store.get_run(run_id)).input
    finally:
        await store.close()


def test_the_envelope_is_json_a_column_of_either_store_takes() -> None:
    sealed = SEALER.seal("x", HERE, KEY)
    assert sealed.startswith(envelope.PREFIX)
    assert json.loads(sealed)["$sealed"] == envelope.SCHEME
