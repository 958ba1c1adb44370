"""Work an SDK integration does once per process, before a worker claims
its first run, in a thread: the SDKs build their pydantic schemas and type
adapters on first use, which takes a tenth of a second to a second of CPU
on a busy machine. Done on the event loop in the middle of a run, it holds
every other run's calls and makes the lease keeper log "event loop blocked"
(see `stead.worker.leases`) for work that is no run's fault.

An adapter or integration `register`s a function when it is imported; the
worker awaits `ready()` before its first claim. Each function runs once; one
that fails is logged and skipped (it costs time later, not correctness).

`idle()` is the same for stead's own modules that a run imports on first
use, done once the worker has nothing to do rather than before its first
claim (which would delay it).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
from collections.abc import Callable

log = logging.getLogger("stead.worker")

_registered: list[Callable[[], object]] = []
_done: set[Callable[[], object]] = set()
_lock = threading.Lock()

# Imported by a run's first wait (its token, the keys, the policy binding)
# and kept out of `import stead`, whose cost every process pays. Imported on
# the event loop when a delivery wakes an idle worker's first run, they cost
# that wake-up about 10 ms on a quiet 2-core box (the p99 of `python -m bench
# --mixed`'s deliver → next step), more on a busy one.
WHEN_IDLE = ("stead.workflow.waits",)
_idle_started = False


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


async def idle() -> None:
    """Import `WHEN_IDLE`, once per process, off the event loop. A run that
    needs one of them meanwhile waits for that import (as it would have
    made it), not for the others."""
    global _idle_started
    with _lock:
        if _idle_started:
            return
        _idle_started = True
    await asyncio.to_thread(_import_idle)


def _import_idle() -> None:
    for name in WHEN_IDLE:
        try:
            importlib.import_module(name)
        except Exception:  # imported on first use instead
            log.exception("importing %s ahead of use failed", name)
