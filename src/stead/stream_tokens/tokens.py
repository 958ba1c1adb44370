"""What an end-user stream token is, and how it is checked.

A token reads `sst1.<key id>.<claims>.<mac>`: `claims` is base64url JSON
(`run`, `stream` or null for every stream of the run, `iat` and `exp` in
Unix seconds, `id` a random id that names the token in a revocation), and
`mac` the HMAC-SHA256 of the claims under the keyring's key `key id` (the keys
that sign wait tokens, `stead.keys`; never in the database), with a domain of
its own so that no other token of stead's is ever taken for one. The claims
are readable by whoever holds the token; they hold nothing secret, and
nothing is believed of them before the MAC is checked.

A check answers a `Grant` or a `Refusal` that says only what the holder may
know: a token that does not verify (malformed, tampered, signed by a key not
held or revoked) is "not a valid stream token" whatever the reason, and
nothing about the run is read before the MAC checks.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import hashlib
import hmac
import json
import secrets
from typing import Any

from stead import bounds, errors
from stead.keys import Keyring

PREFIX = "sst1"
DOMAIN = b"stead stream token v1\x00"
# The longest token text read at all: a run id and a stream name of a few
# hundred characters fit; anything longer is refused before it is decoded.
MAX_CHARS = 2048
# The longest a token lives: a browser tab left open a week reconnects with
# a token minted for the session it is in.
MAX_TTL = 7 * 86400.0
DEFAULT_TTL = 3600.0
MAX_RUN_ID = 256
MAX_STREAM = 200


class Status(enum.IntEnum):
    """The HTTP status of a refusal: 401 the token is not good (none, not
    valid, expired), 403 a good token that does not allow this (revoked, for
    another run or stream)."""

    UNAUTHORIZED = 401
    FORBIDDEN = 403


@dataclasses.dataclass(frozen=True)
class Claims:
    """What a token allows: `run`'s streams (only `stream`, if named) until
    `expires_at`; `token_id` names it in a revocation."""

    run_id: str
    stream: str | None
    issued_at: float
    expires_at: float
    token_id: str

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run_id, "stream": self.stream, "iat": self.issued_at,
                "exp": self.expires_at, "id": self.token_id}


@dataclasses.dataclass(frozen=True)
class StreamToken:
    """A minted token: `text` goes to the browser (`?token=`); the rest says
    what it allows. Its text is kept out of `repr`, so a log of the object
    does not carry it."""

    text: str = dataclasses.field(repr=False)
    claims: Claims

    @property
    def token_id(self) -> str:
        return self.claims.token_id

    @property
    def expires_at(self) -> float:
        return self.claims.expires_at

    def query(self) -> str:
        """The query string a stream URL takes it in: `token=<text>`."""
        return f"token={self.text}"


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why a token does not open this stream: the status and a message that
    tells the holder what to do, and nothing about any run."""

    status: Status
    message: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: bytes, body: str) -> str:
    return _b64(hmac.new(secret, DOMAIN + body.encode("ascii"), hashlib.sha256).digest())


def check_ttl(ttl: float) -> float:
    bounds.seconds(ttl, "a stream token's ttl")
    if not 1.0 <= ttl <= MAX_TTL:
        raise errors.InvalidValue(
            f"a stream token lives 1 s to {MAX_TTL:.0f} s (a week), not {ttl!r}: mint a "
            "new one when it runs out")
    return float(ttl)


def mint(ring: Keyring, run_id: str, stream: str | None, now: float,
         ttl: float = DEFAULT_TTL) -> StreamToken:
    """A token for `run_id`'s streams (only `stream`, if given) from `now`
    for `ttl` seconds, signed with the keyring's current key."""
    bounds.text(run_id, "a run id")
    if not run_id or len(run_id) > MAX_RUN_ID:
        raise errors.InvalidValue(f"a run id is 1 to {MAX_RUN_ID} characters")
    if stream is not None:
        bounds.text(stream, "a stream's name")
        if not stream or len(stream) > MAX_STREAM or not stream.isprintable():
            raise errors.InvalidInput(
                f"a stream's name is printable text of 1 to {MAX_STREAM} characters")
    ttl = check_ttl(ttl)
    claims = Claims(run_id, stream, round(now, 3), round(now + ttl, 3),
                    secrets.token_hex(16))
    key = ring.current
    body = _b64(json.dumps(claims.to_json(), separators=(",", ":")).encode())
    return StreamToken(f"{PREFIX}.{key.id}.{body}.{_mac(key.secret, body)}", claims)


INVALID = Refusal(Status.UNAUTHORIZED, "This is not a valid stream token: ask the app that "
                  "gave it for a new one.")
EXPIRED = Refusal(Status.UNAUTHORIZED, "This stream token has expired: ask the app that gave "
                  "it for a new one.")
REVOKED = Refusal(Status.FORBIDDEN, "This stream token was revoked.")
ELSEWHERE = Refusal(Status.FORBIDDEN, "This stream token does not open this stream.")


def _claims(data: object) -> Claims | None:
    if not isinstance(data, dict):
        return None
    run, stream, iat, exp, tid = (data.get(k) for k in ("run", "stream", "iat", "exp", "id"))
    if not (isinstance(run, str) and (stream is None or isinstance(stream, str))
            and isinstance(tid, str)
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in (iat, exp))):
        return None
    assert isinstance(iat, int | float) and isinstance(exp, int | float)
    return Claims(run, stream, float(iat), float(exp), tid)


def read(ring: Keyring, text: str) -> Claims | Refusal:
    """The claims of a token whose MAC verifies under a key the keyring holds
    and has not revoked; `INVALID` for anything else, whatever it is."""
    if not text or len(text) > MAX_CHARS or not text.isascii():
        return INVALID
    parts = text.split(".")
    if len(parts) != 4 or parts[0] != PREFIX:
        return INVALID
    _, kid, body, mac = parts
    key = ring.get(kid)
    if key is None or not hmac.compare_digest(_mac(key.secret, body), mac):
        return INVALID
    try:
        data = json.loads(_unb64(body))
    except (ValueError, binascii.Error):
        return INVALID
    return _claims(data) or INVALID


def judge(claims: Claims, run_id: str, stream: str, now: float,
          revoked: bool) -> Refusal | None:
    """Whether verified `claims` open `run_id`'s stream `stream` at `now`
    (`revoked`: the store holds a revocation of the token or its run's
    tokens); None when they do. Expiry is judged first: an expired token is
    refused the same whatever it names."""
    if now >= claims.expires_at:
        return EXPIRED
    if revoked:
        return REVOKED
    if claims.run_id != run_id or (claims.stream is not None and claims.stream != stream):
        return ELSEWHERE
    return None


def token_id(text: str) -> str | None:
    """The id in a token's claims, read without checking its MAC (what a
    revocation needs: revoking a forged id revokes nothing real)."""
    parts = text.strip().split(".")
    if len(text) > MAX_CHARS or len(parts) != 4 or parts[0] != PREFIX:
        return None
    try:
        found = _claims(json.loads(_unb64(parts[2])))
    except (ValueError, binascii.Error):
        return None
    return None if found is None else found.token_id
