"""What every request passes before a route sees it (an ASGI middleware):

- **Host.** The `Host` header names one of the names the dashboard serves
  (the loopback names, and those given with `--allow-host`): a page on another
  site whose name was rebound to this address sends its own name, and is
  answered 421 with nothing read. Without this, any web page an operator
  visits could read the dashboard through a rebound name.
- **Body size.** A body larger than its route's limit is refused with 413
  before the route reads any of it: by its `Content-Length`, and, for a body
  streamed without one (chunked), as soon as the bytes received pass the limit,
  so nothing is parsed or spooled to disk first.
- **Scheme.** From a trusted proxy (`create_app(trusted_proxies=)`, `stead ui
  --trusted-proxy`), which terminates TLS, the request's scheme is the one its
  `X-Forwarded-Proto` names, so cookies are marked secure and a form's Origin
  is compared with the address the browser used. The peer stays the proxy's
  (`sso_proxy` believes the proxy's headers by it); the client it names counts
  in the throttles (`web.throttle`). `stead ui` then turns uvicorn's own
  reading of these headers off, which would make the client the peer.
- **Stream tokens.** A `token` in the query string (an end user's stream
  token, `stead.stream_tokens`: a browser's `EventSource` cannot send it in
  a header) is taken out of the request's query string, in the scope the
  server handed in, before anything else reads it, and kept under
  `TOKEN_KEY` for the stream route. So the server's access log, which reads
  that same scope when the response starts, and every log or page that shows
  the URL, never see it.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The names a browser sends for this machine.
LOOPBACK = ("localhost", "127.0.0.1", "::1")
# Where a request's stream token is kept, once out of its query string.
TOKEN_KEY = "stead.stream_token"
TOKEN_PARAM = "token"
# The most fields a query string is read with for a token.
MAX_FIELDS = 100


def take_token(scope: Scope) -> None:
    """Move a `token` query parameter out of `scope["query_string"]` (in
    place: the server's own access log reads this dict) into
    `scope[TOKEN_KEY]`. Two tokens, or a query of more than `MAX_FIELDS`
    fields, keep none (such a query is dropped whole): the route then finds
    no token and asks for a login."""
    raw: bytes = scope.get("query_string", b"")
    if not raw:
        return
    try:
        pairs = urllib.parse.parse_qsl(raw.decode("latin-1"), keep_blank_values=True,
                                       max_num_fields=MAX_FIELDS)
    except ValueError:
        scope["query_string"] = b""
        return
    given = [v for k, v in pairs if k == TOKEN_PARAM]
    if not given:
        return
    kept = [(k, v) for k, v in pairs if k != TOKEN_PARAM]
    scope["query_string"] = urllib.parse.urlencode(kept).encode("latin-1")
    if len(given) == 1:
        scope[TOKEN_KEY] = given[0]


class _Overflow(Exception):
    """The body passed its limit while the route was reading it."""


def host_name(header: str) -> str:
    """The name in a `Host` header, without its port: `[::1]:8484` -> `::1`."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


async def _refuse(scope: Scope, send: Send, status: int, message: str) -> None:
    # The webhook's callers read JSON; a person's browser reads text.
    if scope["path"].startswith("/hooks/"):
        body, kind = json.dumps({"error": message}).encode(), b"application/json"
    else:
        body, kind = message.encode(), b"text/plain; charset=utf-8"
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", kind), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"), (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": body})


class Edge:
    """The middleware: `hosts` are the names served, `limit(path)` the largest
    body a route takes, in bytes."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str],
                 limit: Callable[[str], int], proxies: Iterable[str] = ()) -> None:
        self.app = app
        self.hosts = frozenset(host_name(h) for h in hosts)
        self.limit = limit
        self.proxies = frozenset(proxies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        take_token(scope)
        headers = dict(scope["headers"])
        peer = scope.get("client")
        if peer is not None and peer[0] in self.proxies:
            proto = headers.get(b"x-forwarded-proto", b"").decode("latin-1").strip().lower()
            if proto in ("http", "https"):
                scope = {**scope, "scheme": proto}
        host = host_name(headers.get(b"host", b"").decode("latin-1"))
        if host not in self.hosts:
            await _refuse(scope, send, 421, f"this server does not serve the name {host[:80]!r}; "
                          "to serve it, start it with --allow-host NAME")
            return
        limit = self.limit(scope["path"])
        too_large = f"the body is over this route's limit of {limit:,} bytes"
        declared = headers.get(b"content-length")
        # bytes.isdigit() is ASCII only; the length bound keeps int() off a 5,000-digit value.
        if declared is not None and (len(declared) > 18 or not declared.isdigit()
                                     or int(declared) > limit):
            await _refuse(scope, send, 413, too_large)
            return
        received = 0
        started = False

        async def bounded() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _Overflow
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, bounded, sending)
        except _Overflow:
            if not started:
                await _refuse(scope, send, 413, too_large)
