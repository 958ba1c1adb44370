"""Where a payload lives, and the text a sealed payload is stored as."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import json

from stead import errors

SCHEME = "aesgcm1"
# Every sealed value starts so: `{"$sealed": ...` as `json.dumps` writes it.
PREFIX = '{"$sealed": "'
# What a payload reads as once its data key is destroyed, or, with encryption
# off, once it was overwritten by forgetting its task.
FORGOTTEN = '{"$forgotten": true}'
# A sealed blob (a workspace file's bytes): this, then nonce and ciphertext.
BLOB_PREFIX = b"\x00stead sealed blob 1\x00"


class What(enum.StrEnum):
    """Which kind of payload a value is: part of what it is bound to."""

    INPUT = "input"
    RESULT = "result"
    ERROR = "error"
    JOURNAL = "journal"
    EVENT = "event"
    STATE = "state"
    INTENT = "intent"
    STREAM = "stream"
    REQUEST = "request"
    MIGRATION = "migration"
    BLOB = "blob"
    DETAIL = "detail"
    CONVERSATION = "conversation"


@dataclasses.dataclass(frozen=True, slots=True)
class Where:
    """A payload's place: its scope (a run id, or `task:<key>` for task
    state) and its kind."""

    scope: str
    what: What

    def aad(self) -> bytes:
        """The associated data a sealed value is bound to."""
        return b"stead payload 1\x00" + self.scope.encode() + b"\x00" + self.what.encode()


_WHATS = {str(w): w for w in What}


def is_sealed(text: object) -> bool:
    return isinstance(text, str) and text.startswith(PREFIX)


def is_sealed_blob(data: object) -> bool:
    return isinstance(data, bytes | memoryview) and bytes(data[:len(BLOB_PREFIX)]) == BLOB_PREFIX


def is_forgotten(text: object) -> bool:
    return text == FORGOTTEN


def pack(where: Where, blob: bytes) -> str:
    """The sealed value's text: what `json.dumps` makes of its object."""
    return (f'{PREFIX}{SCHEME}", "s": {json.dumps(where.scope)}, "w": "{where.what}", '
            f'"d": "{base64.b64encode(blob).decode("ascii")}"}}')


def unpack(text: str) -> tuple[Where, bytes]:
    """The place a sealed value names, and its nonce and ciphertext."""
    try:
        data = json.loads(text)
        if data["$sealed"] != SCHEME:
            raise errors.PayloadUnreadable(
                f"a payload is sealed with {data['$sealed']!r}, which this stead does not "
                f"know (it knows {SCHEME}); upgrade stead")
        return (Where(str(data["s"]), _WHATS[data["w"]]),
                binascii.a2b_base64(data["d"], strict_mode=True))
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise errors.PayloadUnreadable(f"a sealed payload is malformed ({exc})") from None
