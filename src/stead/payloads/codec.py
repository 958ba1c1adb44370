"""What wraps the data keys payloads are sealed with: the `PayloadCodec`
interface, and stead's own, over the data keys of its keyring.

Each scope (a run, a task's state) has a data key of its own, made at
random; the database keeps it only wrapped (encrypted) by a key it never
holds. Rotating the wrapping key rewraps the data keys (a few bytes each,
`stead keys reencrypt`); the payloads stay as they are. A KMS plugs in by
implementing `PayloadCodec`: `wrap` and `unwrap` call it."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from stead import errors

if TYPE_CHECKING:
    from stead.keys import Keyring

NONCE = 12


@dataclasses.dataclass(frozen=True, slots=True)
class WrappedKey:
    """A data key as stored: the id of the key that wrapped it, and the
    wrapped bytes."""

    key_id: str
    blob: bytes = dataclasses.field(repr=False)


@runtime_checkable
class PayloadCodec(Protocol):
    """Wraps and unwraps data keys. `context` names the scope the data key
    belongs to: bind it (a KMS's encryption context, AES-GCM's associated
    data) so a wrapped key moved to another scope does not unwrap.
    `unwrap` raises `stead.errors.PayloadKeyMissing` (naming the key id) when
    it does not hold `wrapped.key_id`, and `PayloadUnreadable` when the bytes
    do not unwrap."""

    def newest(self) -> str:
        """The id of the key new data keys are wrapped with."""
        ...

    def wrap(self, data_key: bytes, context: bytes) -> WrappedKey: ...

    def unwrap(self, wrapped: WrappedKey, context: bytes) -> bytes: ...


def aes_seal(key: bytes, plain: bytes, aad: bytes) -> bytes:
    """AES-256-GCM: a fresh nonce, then the ciphertext and its tag."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(NONCE)
    return nonce + AESGCM(key).encrypt(nonce, plain, aad)


def aes_open(key: bytes, blob: bytes, aad: bytes) -> bytes | None:
    """The plain bytes, or None if `blob` is not `aes_seal`'s under `key`
    and `aad` (tampered, moved, or another key's)."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if len(blob) < NONCE + 16:
        return None
    try:
        return AESGCM(key).decrypt(blob[:NONCE], blob[NONCE:], aad)
    except InvalidTag:
        return None


class KeyringCodec:
    """Wraps data keys with AES-256-GCM under the data keys of a keyring
    (`Keyring.data_keys`): the newest wraps, every one held unwraps."""

    def __init__(self, ring: Keyring) -> None:
        self.ring = ring

    def newest(self) -> str:
        return self.ring.current_data.id

    def wrap(self, data_key: bytes, context: bytes) -> WrappedKey:
        key = self.ring.current_data
        return WrappedKey(key.id, aes_seal(key.secret, data_key, b"stead data key\x00" + context))

    def unwrap(self, wrapped: WrappedKey, context: bytes) -> bytes:
        key = self.ring.data_key(wrapped.key_id)
        if key is None:
            raise errors.PayloadKeyMissing(wrapped.key_id)
        plain = aes_open(key.secret, wrapped.blob, b"stead data key\x00" + context)
        if plain is None:
            raise errors.PayloadUnreadable(
                f"a data key wrapped by key {wrapped.key_id} does not unwrap: it was changed, "
                "or moved from another scope")
        return plain
