"""News of work within one process: a write that makes a run claimable
(a start, an accepted event, a resume) wakes the idle workers of this
process on the same database at once, before the database would tell them
(PostgreSQL's NOTIFY comes back through the server; SQLite's idle worker
sees a commit at its next look at the file). Other processes still learn
of it from the database, as ever; this only makes a client and a worker
that share a process as quick as one call.

A `Signal` is per database (one file, one PostgreSQL schema), shared by
every store object of the process on it; waiters may sit on different
event loops (threads), so a notice reaches each loop through
`call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Iterator


class Signal:
    """The idle workers of this process waiting on one database."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    def notify(self) -> None:
        """Wake every waiter (from any thread)."""
        with self._lock:
            waiters = list(self._waiters)
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # its loop has closed
                loop.call_soon_threadsafe(event.set)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[asyncio.Event]:
        """An event set by the next `notify` while the block runs."""
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.add(entry)
        try:
            yield entry[1]
        finally:
            with self._lock:
                self._waiters.discard(entry)


_signals: dict[str, Signal] = {}
_signals_lock = threading.Lock()


def signal(key: str) -> Signal:
    """The process's signal for the database `key` names."""
    with _signals_lock:
        found = _signals.get(key)
        if found is None:
            found = _signals[key] = Signal()
        return found


def _forget() -> None:
    # A forked child has none of the parent's waiters (nor its loops).
    global _signals, _signals_lock
    _signals = {}
    _signals_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget)
