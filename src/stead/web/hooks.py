"""The resume contract over HTTP: `POST /hooks/runs/{run_id}/events` and
`POST /hooks/tasks/{task_id}/events` (the task's live run).

The body is one JSON object (`Content-Type: application/json`, at most
`max_body` bytes, counted by `web.edge` before anything is read): `event_id`
(required: redelivery is recognised by it), `wait_id` or `kind`, `payload`,
`bind` (the values the wait is bound to) and, for a human's channel, `token`.
It is authenticated one of two ways:

- the wait's **token** (in the body, or `Authorization: Bearer TOKEN`). It is
  checked against the hashes of the run's waits before anything is delivered:
  a token that is none of them stores nothing and does not count toward a
  wait's lock (only `Client.deliver` callers, who hold the store, count bad
  tokens); the run, its waits and its events are not looked at further.
- a **signature** (`Stead-Signature`, `web.signatures`): bound to the method,
  the path, a time and the event id, taken once. Such an event is an
  operator's delivery (`waits.Operator`): stored with who vouched for it (the
  webhook and its key id), and the token is not asked for.

A caller that authenticates neither way gets the same 401 whatever the run,
task, wait or event id (nothing tells it whether they exist), and counts as a
failure of its address (`web.throttle`: the forwarded client's, from a trusted
proxy): past `throttle.WEBHOOK` failures a minute, 429 until the minute ends.

Answers: 200 `{"verdict": "accepted" | "duplicate", ...}`, 409
`{"verdict": "rejected", "reason": ..., "detail": ...}`; 401 not
authenticated, 429 too many failures from this address, 413 over the size
limit, 415 not JSON, 400 a body that is not the object above.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from stead import errors
from stead.client import Client
from stead.web import signatures, throttle
from stead.workflow import waits

MAX_BODY = 320 * 1024  # the client's event limit (256 KB of JSON) and room for the rest
# A token addressed by kind is looked for among this many of its run's waits.
WAITS_LOOKED_AT = 10_000
NOT_AUTHENTICATED = ("not authenticated: send the wait's token (token, or Authorization: "
                     "Bearer) or a Stead-Signature of this request")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _storable(text: str) -> bool:
    """Whether both stores can keep `text` (and look it up) as it is."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


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
        if body.get(name) is not None and not _storable(body[name]):
            return _error(400, f"{name} holds a NUL or a lone surrogate, which no store keeps")
    if not body.get("event_id"):
        return _error(400, "event_id is required: it is what makes redelivery safe")
    if body.get("bind") is not None and not isinstance(body["bind"], dict):
        return _error(400, "bind is a JSON object")
    return body


class Webhook:
    """The webhook's endpoint, with what it keeps between requests: the
    signatures it took and the failures of each source address."""

    def __init__(self, verifier: signatures.Verifier, failures: throttle.Throttle,
                 source: Callable[[Request], str] = throttle.source) -> None:
        self.verifier = verifier
        self.failures = failures
        self.source = source  # the client a request counts for (see `throttle.source`)

    def _refuse(self, request: Request) -> JSONResponse:
        self.failures.failed(self.source(request))
        return _error(401, NOT_AUTHENTICATED)

    async def deliver(self, request: Request, client: Client, run_id: str | None,
                      task_id: str | None) -> JSONResponse:
        """Handle one webhook delivery to `run_id` (or the live run of `task_id`)."""
        wait = self.failures.refused_for(self.source(request))
        if wait > 0:
            return JSONResponse({"error": "too many failed attempts from this address: try "
                                          f"again in {wait:.0f} s"}, status_code=429,
                                headers={"Retry-After": str(int(wait) + 1)})
        if not _storable(run_id or task_id or ""):
            return _error(400, "the path holds a NUL or a lone surrogate, which no store keeps")
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _error(415, "send JSON (Content-Type: application/json)")
        raw = await request.body()
        body = _fields(raw)
        if isinstance(body, JSONResponse):
            return body
        header = request.headers.get(signatures.HEADER)
        operator, token, taken = None, None, None
        if header is not None:
            try:
                kid, taken = self.verifier.verify(
                    await client.store.keyring(), header, request.method, request.url.path,
                    body["event_id"], raw, time.time())
            except errors.InvalidInput as exc:
                self.failures.failed(self.source(request))
                return _error(401, f"bad signature: {exc}")
            why = body.get("why")
            if why is not None and not (isinstance(why, str) and why.strip()):
                # str.strip() also takes control characters: '\x1f' says nothing
                return _error(400, "why, when given, is a text that says why")
            operator = waits.Operator(f"webhook (key {kid})", why or "signed with stead's key")
        else:
            token = body.get("token")
            bearer = request.headers.get("authorization", "")
            if token is None and bearer.lower().startswith("bearer "):
                token = bearer[7:].strip()
            if not token:
                return self._refuse(request)
        try:
            return await self._judged(request, client, run_id, task_id, body, token, operator)
        except errors.StoreError as exc:
            if taken is not None:  # not judged: the sender's retry of it is taken
                self.verifier.release(taken)
            return _error(503, f"the store is unavailable, try again: {exc}")

    async def _judged(self, request: Request, client: Client, run_id: str | None,
                      task_id: str | None, body: dict[str, Any], token: str | None,
                      operator: waits.Operator | None) -> JSONResponse:
        """The answer to an authenticated event, or to a token yet to be
        found among the run's waits."""
        if task_id is not None:
            found = await client.run_of_task(task_id)
            if found is None and operator is None:
                return self._refuse(request)
            if found is None:
                return JSONResponse({"verdict": "rejected", "reason": "unknown_run",
                                     "detail": f"task {task_id[:64]!r} has no live run"},
                                    status_code=409)
            run_id = found.run_id
        assert run_id is not None
        if token is not None and not await _of_the_run(client, run_id, body, token):
            return self._refuse(request)
        try:
            verdict = await client.deliver(
                run_id, event_id=body["event_id"], payload=body.get("payload"),
                wait_id=body.get("wait_id"), kind=body.get("kind"), bind=body.get("bind"),
                token=token, operator=operator)
        except errors.EventTooLarge as exc:
            return _error(413, str(exc))
        except errors.StoreError:
            raise
        except errors.SteadError as exc:  # InvalidInput, SerializationError, ...
            return _error(400, str(exc))
        return _answer(run_id, verdict)


async def _of_the_run(client: Client, run_id: str, body: dict[str, Any], token: str) -> bool:
    """Whether `token` is the token of one of `run_id`'s waits (its key not
    revoked): what makes its sender the run's, before anything is judged."""
    if waits.token_refusal(await client.store.keyring(), token) is not None:
        return False
    hashed = waits.token_hash(token)
    if body.get("wait_id") is not None:
        one = await client.store.get_wait(body["wait_id"])
        candidates = [] if one is None or one.run_id != run_id else [one]
    else:
        candidates = await client.waits(run_id=run_id, state=None, limit=WAITS_LOOKED_AT)
    return any(w.token_hash is not None and hmac.compare_digest(hashed, w.token_hash)
               for w in candidates)


def _answer(run_id: str, verdict: waits.Delivery) -> JSONResponse:
    if isinstance(verdict, waits.Accepted):
        return JSONResponse({"verdict": "accepted", "event_id": verdict.event_id,
                             "run_id": run_id, "wait_id": verdict.wait_id})
    if isinstance(verdict, waits.Duplicate):
        return JSONResponse({"verdict": "duplicate", "event_id": verdict.event_id,
                             "run_id": run_id, "wait_id": verdict.wait_id})
    return JSONResponse({"verdict": "rejected", "event_id": verdict.event_id, "run_id": run_id,
                         "reason": verdict.reason, "detail": verdict.detail},
                        status_code=409)
