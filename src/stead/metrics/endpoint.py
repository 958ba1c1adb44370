"""`/metrics`, `/healthz` and `/readyz` on a port of their own (`stead worker
--metrics-port N`), served from a thread so that a wedged event loop is
reported, not merely unanswered.

- `/healthz`: 200 while the worker's event loop turns (a task on it beats
  every `BEAT` seconds); 503 once it has not for `stall` seconds. A
  supervisor restarts a process that fails it (a liveness probe).
- `/readyz`: 200 when the store answers, its schema is one this code works
  with, and the keys that sign wait tokens are there; 503 saying which is not
  (a readiness probe: take the worker out of rotation, do not restart it).
- `/metrics`: the Prometheus text (see `exposition`); the store's gauges are
  read on the worker's loop at each scrape, for at most `READ_TIMEOUT` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from stead import errors
from stead.metrics.exposition import CONTENT_TYPE, Exposition

if TYPE_CHECKING:
    from stead.store.base import Store

log = logging.getLogger("stead.metrics")

T = TypeVar("T")

BEAT = 0.5  # seconds between two beats of the loop's pulse
STALL = 10.0  # seconds without a beat before /healthz fails
READ_TIMEOUT = 5.0  # seconds a scrape's or a readiness check's store read may take


async def readiness(store: Store) -> list[str]:
    """What keeps the worker from being ready (empty: ready)."""
    problems: list[str] = []
    try:
        await store.lease_now()
    except Exception as exc:  # whatever the failure, the answer is "not ready", and why
        return [f"store: {exc or type(exc).__name__}"]
    try:
        await store.check_schema()
    except errors.SchemaAhead as exc:
        problems.append(f"schema: {exc}")
    except errors.StoreError as exc:
        problems.append(f"store: {exc}")
    try:
        await store.keyring()
    except errors.KeysUnavailable as exc:
        problems.append(f"keys: {exc}")
    return problems


class Endpoint:
    """The probe and metrics server of one process, bound to its loop and store."""

    def __init__(self, store: Store, exposition: Exposition, *, grace: float,
                 stall: float = STALL) -> None:
        self.store, self.exposition, self.grace, self.stall = store, exposition, grace, stall
        self._loop: asyncio.AbstractEventLoop | None = None
        self._beat = time.monotonic()
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def bind(self, host: str, port: int) -> None:
        """Take `host:port` (0: any free port, see `port`); OSError if taken."""
        self._server = http.server.ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True

    def close(self) -> None:
        """Give the port back and stop recording (once done serving, or never started)."""
        if self._server is not None:
            self._server.server_close()
            self._server = None
        self.exposition.close()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[Endpoint]:
        """Answer on the bound port, from a thread, while inside."""
        assert self._server is not None, "bind() first"
        self._loop = asyncio.get_running_loop()
        self._beat = time.monotonic()
        host = self._server.server_address[0]
        thread = threading.Thread(target=self._server.serve_forever, name="stead metrics",
                                  daemon=True)
        thread.start()
        pulse = asyncio.create_task(self._pulse(), name="stead metrics pulse")
        log.info("metrics, /healthz and /readyz on http://%s:%d", host, self.port)
        try:
            yield self
        finally:
            pulse.cancel()
            await asyncio.gather(pulse, return_exceptions=True)
            await asyncio.to_thread(self._server.shutdown)
            self.close()

    async def _pulse(self) -> None:
        while True:
            self._beat = time.monotonic()
            await asyncio.sleep(BEAT)

    # -- on the server's threads ----------------------------------------------------
    def stalled(self) -> float | None:
        """Seconds since the loop last beat, if past `stall`; else None."""
        since = time.monotonic() - self._beat
        return since if since >= self.stall else None

    def on_loop(self, call: Awaitable[T]) -> T:
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(_awaited(call), self._loop)
        try:
            return future.result(READ_TIMEOUT)
        except TimeoutError:
            future.cancel()
            raise

    def metrics(self) -> bytes:
        try:
            self.on_loop(self.exposition.fleet.refresh(self.store, grace=self.grace))
        except TimeoutError:
            log.warning("metrics: the store's gauges took over %g s; left out", READ_TIMEOUT)
            self.exposition.fleet.latest, self.exposition.fleet.up = None, False
        return self.exposition.render()

    def ready(self) -> list[str]:
        if (since := self.stalled()) is not None:
            return [f"event loop: has not turned for {since:.1f} s"]
        try:
            return self.on_loop(readiness(self.store))
        except TimeoutError:
            return [f"store: no answer within {READ_TIMEOUT:g} s"]


async def _awaited(call: Awaitable[T]) -> T:
    return await call


def _handler(endpoint: Endpoint) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, endpoint.metrics(), CONTENT_TYPE)
            elif path == "/healthz":
                since = endpoint.stalled()
                if since is None:
                    self._json(200, {"status": "ok"})
                else:
                    self._json(503, {"status": "stalled",
                                     "problems": [f"event loop: has not turned for "
                                                  f"{since:.1f} s"]})
            elif path == "/readyz":
                problems = endpoint.ready()
                self._json(503 if problems else 200,
                           {"status": "not ready" if problems else "ready",
                            "problems": problems})
            else:
                self._json(404, {"status": "not found",
                                 "problems": ["GET /metrics, /healthz or /readyz"]})

        def _json(self, code: int, body: dict[str, Any]) -> None:
            self._send(code, json.dumps(body).encode(), "application/json")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a scrape every few seconds is no news

    return Handler
