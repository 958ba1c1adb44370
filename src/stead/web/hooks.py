"""The resume contract over HTTP: `POST /hooks/runs/{run_id}/events` and
`POST /hooks/tasks/{task_id}/events` (the task's live run).

The body is one JSON object (`Content-Type: application/json`, at most
`max_body` bytes): `event_id` (required: redelivery is recognised by it),
`wait_id` or `kind`, `payload`, `bind` (the values the wait is bound to) and,
for a human's channel, `token`. It is authenticated one of two ways:

- the wait's **token** (in the body, or `Authorization: Bearer TOKEN`), judged
  with the event as `Client.deliver` judges it;
- an **HMAC signature** of the body with a key from stead's key store
  (`stead.keys`, the keys that sign wait tokens): the header
  `Stead-Signature: t=UNIX_TIME,k=KEY_ID,v1=HEX`, where `HEX` is
  HMAC-SHA256 of `"{t}."` followed by the body's bytes, `t` within
  `SIGNATURE_TOLERANCE` seconds of now. Such an event is an operator's
  delivery (`waits.Operator`): stored with who vouched for it (the webhook and
  its key id), and the token is not asked for.

Answers: 200 `{"verdict": "accepted" | "duplicate", ...}`, 409
`{"verdict": "rejected", "reason": ..., "detail": ...}`; 401 without a token
or a valid signature, 413 over the size limit, 415 not JSON, 400 a body that
is not the object above.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from stead import errors, keys, waits
from stead.client import Client

SIGNATURE_HEADER = "stead-signature"
SIGNATURE_TOLERANCE = 300.0
MAX_BODY = 320 * 1024  # the client's event limit (256 KB of JSON) and room for the rest


def sign(key: keys.Key, body: bytes, at: float | None = None) -> str:
    """The `Stead-Signature` header value for `body`, signed with `key` at `at`."""
    t = int(time.time() if at is None else at)
    mac = hmac.new(key.secret, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},k={key.id},v1={mac}"


def verify(ring: keys.Keyring, header: str, body: bytes, now: float) -> str:
    """The id of the key that signed `body`; raises `InvalidInput` saying why not."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    t, kid, mac = parts.get("t", ""), parts.get("k", ""), parts.get("v1", "")
    if not (t.isdigit() and len(t) <= 12 and kid and mac):
        raise errors.InvalidInput("Stead-Signature is not t=UNIX_TIME,k=KEY_ID,v1=HEX")
    if abs(now - int(t)) > SIGNATURE_TOLERANCE:
        raise errors.InvalidInput(f"the signature's time is more than {SIGNATURE_TOLERANCE:g} s "
                                  "from now")
    key = ring.get(kid) if ring.accepts(kid) else None
    if key is None:
        raise errors.InvalidInput(f"key {kid[:40]!r} is revoked or unknown")
    expected = hmac.new(key.secret, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, mac):
        raise errors.InvalidInput("the signature does not match the body")
    return key.id


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _body(request: Request, limit: int) -> bytes | JSONResponse:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        return _error(413, f"the body is over the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return _error(413, f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _fields(raw: bytes) -> dict[str, Any] | JSONResponse:
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return _error(400, "the body is not valid JSON")
    if not isinstance(body, dict):
        return _error(400, "the body is a JSON object: event_id, wait_id or kind, payload, bind")
    for name in ("event_id", "wait_id", "kind", "token", "why"):
        if body.get(name) is not None and not isinstance(body[name], str):
            return _error(400, f"{name} is a string")
    if not body.get("event_id"):
        return _error(400, "event_id is required: it is what makes redelivery safe")
    if body.get("bind") is not None and not isinstance(body["bind"], dict):
        return _error(400, "bind is a JSON object")
    return body


async def deliver(request: Request, client: Client, run_id: str | None, task_id: str | None,
                  limit: int) -> JSONResponse:
    """Handle one webhook delivery to `run_id` (or the live run of `task_id`)."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return _error(415, "send JSON (Content-Type: application/json)")
    raw = await _body(request, limit)
    if isinstance(raw, JSONResponse):
        return raw
    body = _fields(raw)
    if isinstance(body, JSONResponse):
        return body
    token = body.get("token")
    bearer = request.headers.get("authorization", "")
    if token is None and bearer.lower().startswith("bearer "):
        token = bearer[7:].strip()
    signature = request.headers.get(SIGNATURE_HEADER)
    operator = None
    if signature is not None:
        try:
            kid = verify(await client.store.keyring(), signature, raw, time.time())
        except errors.InvalidInput as exc:
            return _error(401, f"bad signature: {exc}")
        operator = waits.Operator(f"webhook (key {kid})", body.get("why") or
                                  "signed with stead's key")
        token = None
    elif not token:
        return _error(401, "authenticate with the wait's token (token, or Authorization: "
                           "Bearer) or a Stead-Signature of the body")
    if task_id is not None:
        found = await client.run_of_task(task_id)
        if found is None:
            return JSONResponse({"verdict": "rejected", "reason": "unknown_run",
                                 "detail": f"task {task_id[:64]!r} has no live run"},
                                status_code=409)
        run_id = found.run_id
    assert run_id is not None
    try:
        verdict = await client.deliver(
            run_id, event_id=body["event_id"], payload=body.get("payload"),
            wait_id=body.get("wait_id"), kind=body.get("kind"), bind=body.get("bind"),
            token=token, operator=operator)
    except errors.EventTooLarge as exc:
        return _error(413, str(exc))
    except (errors.InvalidInput, errors.SerializationError) as exc:
        return _error(400, str(exc))
    except errors.StoreError as exc:
        return _error(503, f"the store is unavailable, try again: {exc}")
    except errors.SteadError as exc:
        return _error(400, str(exc))
    if isinstance(verdict, waits.Accepted):
        return JSONResponse({"verdict": "accepted", "event_id": verdict.event_id,
                             "run_id": run_id, "wait_id": verdict.wait_id})
    if isinstance(verdict, waits.Duplicate):
        return JSONResponse({"verdict": "duplicate", "event_id": verdict.event_id,
                             "run_id": run_id, "wait_id": verdict.wait_id})
    return JSONResponse({"verdict": "rejected", "event_id": verdict.event_id, "run_id": run_id,
                         "reason": verdict.reason, "detail": verdict.detail},
                        status_code=409)
