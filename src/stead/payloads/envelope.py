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


def is_sealed(text: object) -> bool:
    return isinstance(text, str) and text.startswith(PREFIX)


def is_forgotten(text: object) -> bool:
    return text == FORGOTTEN


def pack(where: Where, blob: bytes) -> str:
    return json.dumps({"$sealed": SCHEME, "s": where.scope, "w": str(where.what),
                       "d": base64.b64encode(blob).decode("ascii")})


def unpack(text: str) -> tuple[Where, bytes]:
    """The place a sealed value names, and its nonce and ciphertext."""
    try:
        data = json.loads(text)
        if data["$sealed"] != SCHEME:
            raise errors.PayloadUnreadable(
                f"a payload is sealed with {data['$sealed']!r}, which this stead does not "
                f"know (it knows {SCHEME}); upgrade stead")
        return (Where(str(data["s"]), What(data["w"])),
                base64.b64decode(data["d"], validate=True))
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise errors.PayloadUnreadable(f"a sealed payload is malformed ({exc})") from None
