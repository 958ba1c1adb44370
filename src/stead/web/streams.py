"""A run's durable stream as server-sent events: `GET /runs/RUN/streams/NAME`.

Each entry is one event: `id:` its offset, `event:` its kind (`value`,
`superseded`, `closed`), `data:` the entry as JSON (`StreamEntry.to_json`).
A browser's `EventSource` reconnects with `Last-Event-ID`, the last offset
it got, and is sent only what came after it (`?after=N` does the same for a
first connection), so nothing is missed or sent twice. The response ends
with the stream (closed, or the run ended), or after `MAX_SECONDS`
(`create_app(stream_seconds=)`: shorter behind a proxy that cuts idle
connections), when the browser reconnects from where it was, `RETRY_MS`
later (the `retry:` line each response starts with).

Reading needs a logged-in operator who may see the run (unless the
dashboard is public), or an end user's stream token for this run and stream
(`?token=`, minted by the app with `Client.stream_token`; `web.edge` has
taken it out of the query string before any log could see it). A token
opens this route alone, and its answers say nothing of any run: 401 for a
token that is not valid or has expired, 403 for one revoked or made for
another run or stream, checked before the run is looked up. Answers to a
token carry `Access-Control-Allow-Origin: *`, so the app's own page (on
its own origin) can read them: the token in the URL is the credential, no
cookie is sent or read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from stead import errors
from stead.client import Client
from stead.web.edge import TOKEN_KEY
from stead.workflow.streams import check_name

# How long one response follows a stream before the browser reconnects: no
# connection is held without end.
MAX_SECONDS = 300.0
# How often the stream's reader asks the store for new entries, at the slowest.
POLL = 0.25
# How long a browser waits before it reconnects (its own default is about 3 s).
RETRY_MS = 1000
_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no",
            "X-Content-Type-Options": "nosniff"}


def _offset(text: str | None) -> int | None:
    """A `Last-Event-ID` or `after`: a whole number of at most 18 digits."""
    if text is None or text == "":
        return 0
    text = text.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 18):
        return None
    return int(text)


async def events(client: Client, run_id: str, name: str, after: int,
                 seconds: float = MAX_SECONDS) -> AsyncIterator[bytes]:
    """The stream's entries after `after` as SSE events, for `seconds` at most."""
    entries = client.read_stream(run_id, name, after=after, poll=POLL)
    yield f"retry: {RETRY_MS}\n\n".encode()
    try:
        async with asyncio.timeout(seconds):
            async for entry in entries:
                data = json.dumps(entry.to_json(), separators=(",", ":"))
                yield f"id: {entry.offset}\nevent: {entry.kind}\ndata: {data}\n\n".encode()
    except TimeoutError:
        yield b": reconnect with Last-Event-ID\n\n"
    finally:
        await entries.aclose()  # type: ignore[attr-defined]


def token_of(request: Request) -> str | None:
    """The stream token the request carries (see `web.edge.take_token`)."""
    found = request.scope.get(TOKEN_KEY)
    return found if isinstance(found, str) else None


async def sse(client: Client, request: Request, token: str | None = None,
              seconds: float = MAX_SECONDS) -> Response:
    """The stream as SSE, for `client` (an operator's, scoped to what they
    may see) or for the holder of `token` (checked here first)."""
    run_id, name = request.path_params["run_id"], request.path_params["name"]
    headers = _HEADERS if token is None else {**_HEADERS, "Access-Control-Allow-Origin": "*"}
    if token is not None:
        refused = await client.check_stream_token(token, run_id, name)
        if refused is not None:
            return PlainTextResponse(refused.message, int(refused.status), headers=headers)
    after = _offset(request.headers.get("last-event-id", request.query_params.get("after")))
    if after is None:
        return PlainTextResponse("Last-Event-ID (or after) is an offset: a whole number.",
                                 400, headers=headers)
    try:
        check_name(name)
        await client.get(run_id)
    except errors.InvalidInput as exc:
        return PlainTextResponse(str(exc), 400, headers=headers)
    except errors.UnknownRun:
        return PlainTextResponse(f"There is no run {run_id}.", 404, headers=headers)
    return StreamingResponse(events(client, run_id, name, after, seconds),
                             media_type="text/event-stream", headers=headers)
