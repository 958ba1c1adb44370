"""Sealing and opening payloads with their scope's data key, and the data
keys this process has opened (a bounded cache, so a step costs no lookup)."""

from __future__ import annotations

import collections
import dataclasses
import os

from stead import errors
from stead.payloads import codec as codecs
from stead.payloads import envelope
from stead.payloads.codec import PayloadCodec, WrappedKey
from stead.payloads.envelope import Where

KEY_BYTES = 32
CACHED_KEYS = 4096


@dataclasses.dataclass(frozen=True, slots=True)
class DataKey:
    """A scope's data key, unwrapped (kept in memory only)."""

    scope: str
    secret: bytes = dataclasses.field(repr=False)


def context(scope: str) -> bytes:
    """What a scope's wrapped data key is bound to."""
    return b"stead scope\x00" + scope.encode()


class Sealer:
    """Seals and opens payloads (see `stead.payloads`), with `codec` wrapping
    the data keys."""

    def __init__(self, codec: PayloadCodec, cached: int = CACHED_KEYS) -> None:
        self.codec = codec
        self._keys: collections.OrderedDict[str, DataKey] = collections.OrderedDict()
        self._cached = cached

    # -- data keys ----------------------------------------------------------------------
    def known(self, scope: str) -> DataKey | None:
        """The scope's data key if this process holds it."""
        key = self._keys.get(scope)
        if key is not None:
            self._keys.move_to_end(scope)
        return key

    def learn(self, key: DataKey) -> None:
        """Keep `key` (read back from the database, so it is committed)."""
        self._keys[key.scope] = key
        self._keys.move_to_end(key.scope)
        while len(self._keys) > self._cached:
            self._keys.popitem(last=False)

    def drop(self, scope: str) -> None:
        self._keys.pop(scope, None)

    def new_key(self, scope: str) -> tuple[DataKey, WrappedKey]:
        """A new data key for `scope`, and how it is stored."""
        secret = os.urandom(KEY_BYTES)
        return DataKey(scope, secret), self.codec.wrap(secret, context(scope))

    def open_key(self, scope: str, wrapped: WrappedKey) -> DataKey:
        secret = self.codec.unwrap(wrapped, context(scope))
        if len(secret) != KEY_BYTES:
            raise errors.PayloadUnreadable(f"the data key of {scope} is not {KEY_BYTES} bytes")
        return DataKey(scope, secret)

    # -- payloads -----------------------------------------------------------------------
    def seal(self, text: str, where: Where, key: DataKey) -> str:
        """`text` sealed under `key`, bound to `where`."""
        if key.scope != where.scope:
            raise errors.PayloadUnreadable(f"the data key of {key.scope} cannot seal {where}")
        blob = codecs.aes_seal(key.secret, text.encode("utf-8", "surrogatepass"), where.aad())
        return envelope.pack(where, blob)

    def unseal(self, text: str, expected: Where | None, key: DataKey) -> str:
        """The plain text of sealed `text`. `expected`: where the value was
        read from, when the reader knows it; a value sealed for another
        place is refused, as is one changed since."""
        where, blob = envelope.unpack(text)
        if (expected is not None and where != expected) or where.scope != key.scope:
            raise errors.PayloadUnreadable(
                f"a payload read as {expected or key.scope} was sealed for {where}: it was "
                "moved between rows")
        plain = codecs.aes_open(key.secret, blob, where.aad())
        if plain is None:
            raise errors.PayloadUnreadable(
                f"the {where.what} payload of {where.scope} does not open under its data key: "
                "it was changed since it was written")
        return plain.decode("utf-8", "surrogatepass")
