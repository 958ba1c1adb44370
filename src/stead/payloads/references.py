"""Large values by reference: a payload whose JSON text is longer than the
store's inline limit (`STEAD_INLINE_BYTES`, 256 KB by default) is written to
the blob store (`stead.payloads.blobs`) and stored as a reference in its
place:

    {"$blob":"<sha256>","size":<bytes>,"codec":"json"}

`codec` says what the blob's bytes are: `json`, the value's JSON text as it
would have been stored inline; `sealed`, that text sealed under its run's
data key (`stead.payloads.sealer`), when the store seals payloads. The
reference is itself a payload: the store seals it like any other.

Which blob store: `open_store(url, blobs=...)`, else `STEAD_BLOBS` (a
directory or an fsspec URL); else, for an SQLite file, the directory beside
it (`stead.db.blobs`); else (PostgreSQL, an in-memory SQLite) none, and
values stay inline up to the hard cap (`WorkerOptions.max_result_bytes`).
"""

from __future__ import annotations

import dataclasses
import json
import os

from stead import bounds, errors
from stead.payloads.blobs import BlobStore

BLOBS_ENV = "STEAD_BLOBS"
INLINE_ENV = "STEAD_INLINE_BYTES"
INLINE_BYTES = 256 * 1024
# What every reference starts with, as `Reference.text` writes it.
MARK = '{"$blob":"'
# A reference is short; a longer text that starts like one is a value.
_REFERENCE_CHARS = 200
CODEC = "json"
SEALED = "sealed"


@dataclasses.dataclass(frozen=True, slots=True)
class Reference:
    """Where a large value is: its blob's sha256, its size in bytes and what
    the bytes are (`codec`)."""

    sha256: str
    size: int
    codec: str = CODEC

    def text(self) -> str:
        return json.dumps({"$blob": self.sha256, "size": self.size, "codec": self.codec},
                          separators=(",", ":"))

    @classmethod
    def of(cls, text: str | None) -> Reference | None:
        """The reference `text` is, or None if it is a value."""
        if text is None or len(text) > _REFERENCE_CHARS or not text.startswith(MARK):
            return None
        try:
            data = json.loads(text)
            found = cls(str(data["$blob"]), int(data["size"]), str(data["codec"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise errors.CorruptRecord(f"a large value's reference is malformed ({exc}): "
                                       f"{text[:120]!r}") from None
        if len(found.sha256) != 64 or found.size < 0:
            raise errors.CorruptRecord(f"a large value's reference is malformed: {text!r}")
        return found


def is_reference(text: str | None) -> bool:
    return text is not None and len(text) <= _REFERENCE_CHARS and text.startswith(MARK)


class LargeValues:
    """Puts values over `inline_bytes` into `blobs` and reads them back."""

    def __init__(self, blobs: BlobStore, inline_bytes: int = INLINE_BYTES) -> None:
        bounds.integer(inline_bytes, "the inline limit for large values", least=1024)
        self.blobs = blobs
        self.inline_bytes = inline_bytes

    def outside(self, text: str | None) -> bool:
        """Whether `text` goes to the blob store. JSON from `stead.codec` is
        ASCII, so its length is its size in bytes."""
        return text is not None and len(text) > self.inline_bytes

    def put(self, text: str, codec: str = CODEC) -> Reference:
        """Store `text` (what `codec` says it is) durably; its reference
        (blocking: call in a thread)."""
        sha256, size = self.blobs.put_text(text)
        return Reference(sha256, size, codec)

    def get(self, ref: Reference) -> str:
        """The text of the blob `ref` names: the value, or with codec
        `sealed` the value sealed (blocking: call in a thread)."""
        if ref.codec not in (CODEC, SEALED):
            raise errors.StoreError(
                f"the large value {ref.sha256} is stored as {ref.codec!r}, which this stead "
                "cannot read; upgrade stead")
        return self.blobs.get_text(ref.sha256, ref.size)


def inline_bytes(given: int | None = None) -> int:
    """The inline limit: `given`, else `STEAD_INLINE_BYTES`, else 256 KB."""
    if given is not None:
        return given
    raw = os.environ.get(INLINE_ENV)
    if raw is None or not raw.strip():
        return INLINE_BYTES
    try:
        return int(raw)
    except ValueError:
        raise errors.StoreError(
            f"{INLINE_ENV}={raw[:40]!r} is not a number of bytes; give one, e.g. 262144"
        ) from None


def blob_url(given: str | None, database_url: str, sqlite_path: str | None) -> str | None:
    """Where large values go (see the module docstring); None: nowhere."""
    if given is not None:
        return given or None
    env = os.environ.get(BLOBS_ENV)
    if env is not None:
        return env.strip() or None
    if database_url.startswith("sqlite:") and sqlite_path not in (None, "", ":memory:"):
        return f"{sqlite_path}.blobs"
    return None


def configured(given: str | None, inline: int | None, database_url: str,
               sqlite_path: str | None) -> LargeValues | None:
    """The store's large values (None: none are kept outside)."""
    url = blob_url(given, database_url, sqlite_path)
    if url is None:
        return None
    return LargeValues(BlobStore(url), inline_bytes(inline))
