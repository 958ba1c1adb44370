"""The webhook's `Stead-Signature`: an HMAC bound to the request it signs.

    Stead-Signature: t=UNIX_TIME,k=KEY_ID,v1=HEX

`HEX` is HMAC-SHA256, under the key `KEY_ID` of stead's key store (the keys
that sign wait tokens, `stead.keys`), of the lines

    v1
    METHOD          POST
    PATH            /hooks/runs/RUN/events (as the server decodes it)
    UNIX_TIME       the t= value
    EVENT_ID        the body's event_id
    SHA256          hex of the body's bytes

joined by newlines. So a signature is good for one event, sent to one run's
(or task's) URL, around one time: sent to another run's URL it does not
verify. It is refused when `t` is more than the tolerance (`TOLERANCE`,
`create_app(signature_tolerance=...)`) from the server's clock, and when this
server has already taken it (`Replays`): to redeliver an event, sign it again
(a new `t`, the same event id: an accepted event is then a duplicate).

Rotation: any key that is not revoked verifies; `stead keys revoke ID` ends
its signatures too.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time

from stead import errors, keys

HEADER = "stead-signature"
TOLERANCE = 300.0
VERSION = "v1"
# Signatures remembered at once: a signature is kept until its time is past
# the tolerance, and only signatures that verified are kept, so filling this
# takes a key.
REMEMBERED = 100_000


def message(method: str, path: str, t: int, event_id: str, body: bytes) -> bytes:
    """What the signature's HMAC is computed over."""
    # surrogatepass: any text has its bytes (the webhook refuses such ids anyway)
    return "\n".join((VERSION, method.upper(), path, str(t), event_id,
                      hashlib.sha256(body).hexdigest())).encode("utf-8", "surrogatepass")


def sign(key: keys.Key, path: str, body: bytes, *, method: str = "POST",
         at: float | None = None) -> str:
    """The `Stead-Signature` header value for sending `body` (a JSON object
    with its `event_id`) to `path` (`/hooks/runs/RUN/events` or
    `/hooks/tasks/TASK/events`), signed with `key` at `at` (now)."""
    event_id = json.loads(body).get("event_id")
    if not isinstance(event_id, str) or not event_id:
        raise errors.InvalidInput("the body to sign has no event_id: add one, it is what "
                                  "makes redelivery safe")
    t = int(time.time() if at is None else at)
    mac = hmac.new(key.secret, message(method, path, t, event_id, body),
                   hashlib.sha256).hexdigest()
    return f"t={t},k={key.id},{VERSION}={mac}"


class Verifier:
    """Checks signatures against a keyring, the clock and what it already took."""

    def __init__(self, tolerance: float = TOLERANCE, remembered: int = REMEMBERED) -> None:
        if not tolerance > 0:
            raise ValueError("the signature tolerance is a number of seconds above 0")
        self.tolerance = tolerance
        self.remembered = remembered
        self._seen: dict[str, float] = {}  # the signature's HMAC -> when it can be forgotten
        self._sweep_at = 1024  # swept when it holds this many: doubling keeps it O(1) a call

    def verify(self, ring: keys.Keyring, header: str, method: str, path: str, event_id: str,
               body: bytes, now: float) -> tuple[str, str]:
        """The id of the key that signed this request and the signature's
        HMAC (for `release`); raises `InvalidInput` saying why not. A
        signature verified here is refused from then on (see `release`)."""
        parts = dict(p.split("=", 1) for p in header[:512].split(",") if "=" in p)
        t, kid, mac = parts.get("t", ""), parts.get("k", ""), parts.get(VERSION, "")
        if not (t.isascii() and t.isdigit() and len(t) <= 12 and kid and mac):
            raise errors.InvalidInput(f"Stead-Signature is not t=UNIX_TIME,k=KEY_ID,"
                                      f"{VERSION}=HEX")
        if abs(now - int(t)) > self.tolerance:
            raise errors.InvalidInput(f"the signature's time is more than "
                                      f"{self.tolerance:g} s from now: sign it again")
        key = ring.get(kid) if ring.accepts(kid) else None
        if key is None:
            raise errors.InvalidInput(f"key {kid[:40]!r} is revoked or unknown")
        expected = hmac.new(key.secret, message(method, path, int(t), event_id, body),
                            hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected.encode(), mac.encode()):
            raise errors.InvalidInput("the signature does not match this method, path, "
                                      "time, event id and body")
        self._forget(now)
        if expected in self._seen:
            raise errors.InvalidInput("this signature was taken already: to deliver the "
                                      "event again, sign it again")
        if len(self._seen) >= self.remembered:
            raise errors.InvalidInput(f"{self.remembered:,} signatures were taken within "
                                      f"{self.tolerance:g} s: try again later")
        self._seen[expected] = int(t) + self.tolerance
        return key.id, expected

    def release(self, mac: str) -> None:
        """Forget a signature that was taken but not judged (the store was
        unavailable): the sender's retry of the same request is taken."""
        self._seen.pop(mac, None)

    def _forget(self, now: float) -> None:
        if len(self._seen) >= min(self._sweep_at, self.remembered):
            for mac in [m for m, until in self._seen.items() if until < now]:
                del self._seen[mac]
            self._sweep_at = max(1024, 2 * len(self._seen))
