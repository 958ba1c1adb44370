"""Work an SDK integration does once per process, before a worker claims
its first run, in a thread: the SDKs build their pydantic schemas and type
adapters on first use, which takes a tenth of a second to a second of CPU
on a busy machine. Done on the event loop in the middle of a run, it holds
every other run's calls and makes the lease keeper log "event loop blocked"
(see `stead.worker.leases`) for work that is no run's fault.

An adapter or integration `register`s a function when it is imported; the
worker awaits `ready()` before its first claim. Each function runs once; one
that fails is logged and skipped (it costs time later, not correctness).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

log = logging.getLogger("stead.worker")

_registered: list[Callable[[], object]] = []
_done: set[Callable[[], object]] = set()
_lock = threading.Lock()


def register(fn: Callable[[], object]) -> None:
    """Run `fn` (no arguments, in a thread) before the first claim of any worker."""
    with _lock:
        if fn not in _registered:
            _registered.append(fn)


def _run() -> None:
    with _lock:
        todo = [fn for fn in _registered if fn not in _done]
        _done.update(todo)
    for fn in todo:
        try:
            fn()
        except Exception:  # a warm-up only saves time: never a reason not to work
            log.exception("warming up %s failed; it is done on first use instead",
                          getattr(fn, "__qualname__", fn))


async def ready() -> None:
    """Run the registered warm-ups not run yet, off the event loop."""
    with _lock:
        pending = any(fn not in _done for fn in _registered)
    if pending:
        await asyncio.to_thread(_run)
