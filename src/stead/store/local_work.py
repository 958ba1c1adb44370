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

An idle worker also offers its free slots as a `Taker`: a delivery made in
this process that wakes a run the worker hosts leases the run to it in the
delivery's own transaction and hands it the run's row, so the worker starts
at once, with no claim of its own (the claim is a transaction, a commit
and a sync, of its own). The slot is reserved before the transaction and
given back if the delivery leases nothing. A delivery that reserved a slot
wakes no one else: told, every idle worker of the fleet would claim, only to
find the run leased.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from stead.waiting import Bell

if TYPE_CHECKING:
    from stead.records import RunRow

log = logging.getLogger("stead.store")


class Taker:
    """An idle worker's offer to take woken runs straight from a delivery.
    `hosted` and `open` change while it idles; `pending` counts the slots
    reserved by deliveries under way, which the worker must not claim into
    until they are given or given back. Made and read on the worker's loop;
    reserved and given from any thread, under its signal's lock."""

    def __init__(self, worker_id: str, lease_seconds: float,
                 arrive: Callable[[RunRow], None]) -> None:
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.hosted: frozenset[str] = frozenset()
        self.open = 0
        self.pending = 0
        self._arrive = arrive
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()  # replaced by the signal's when offered

    def give(self, row: RunRow) -> None:
        """Hand the worker the run leased to it (from any thread)."""

        def arrive() -> None:
            with self._lock:
                self.pending -= 1
            self._arrive(row)

        try:
            self._loop.call_soon_threadsafe(arrive)
        except RuntimeError:  # its loop has closed: the lease runs out, then a takeover
            log.warning("run %s was leased to worker %s, which has stopped: it is taken "
                        "over when the lease runs out", row.run_id, self.worker_id)

    def give_back(self) -> None:
        """The reserved slot was not used (from any thread)."""
        with self._lock:
            self.pending -= 1


class Signal:
    """The idle workers of this process waiting on one database."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, Bell]] = set()
        self._takers: list[Taker] = []

    @contextlib.contextmanager
    def offering(self, taker: Taker, slots: int, hosted: frozenset[str]) -> Iterator[None]:
        """Offer `slots` of `taker` to deliveries while the block runs."""
        with self._lock:
            taker._lock = self._lock
            taker.open, taker.hosted = slots, hosted
            self._takers.append(taker)
        try:
            yield
        finally:
            with self._lock:
                taker.open = 0
                self._takers.remove(taker)

    def reserve(self, code: str) -> Taker | None:
        """A slot of an idle worker of this process that hosts `code`
        (`workflow@version`), reserved; None if there is none."""
        with self._lock:
            for taker in self._takers:
                if taker.open > 0 and code in taker.hosted:
                    taker.open -= 1
                    taker.pending += 1
                    return taker
        return None

    def notify(self) -> None:
        """Wake every waiter (from any thread)."""
        with self._lock:
            waiters = list(self._waiters)
        for loop, bell in waiters:
            with contextlib.suppress(RuntimeError):  # its loop has closed
                loop.call_soon_threadsafe(bell.set)

    @contextlib.contextmanager
    def waiting(self, ring: Callable[[], None] | None = None) -> Iterator[Bell]:
        """A bell set by the next `notify` while the block runs; `ring` is
        called as it is set."""
        bell = Bell()
        entry = (asyncio.get_running_loop(), bell)
        with self._lock:
            self._waiters.add(entry)
        try:
            with bell.listening(ring):
                yield bell
        finally:
            with self._lock:
                self._waiters.discard(entry)


class Lessee:
    """A delivery's way to this process's idle workers: it reserves at most
    one slot, for the code of the run it wakes (the flow may run twice, on a
    retried transaction), and after the write gives the slot the leased run
    or gives it back."""

    def __init__(self, signal: Signal, lease_now: float | None) -> None:
        self._signal = signal
        self.lease_now = lease_now
        self.taker: Taker | None = None
        self._reserved = False

    def reserve(self, code: str) -> Taker | None:
        if not self._reserved:
            self._reserved = True
            self.taker = self._signal.reserve(code)
        return self.taker

    def settle(self, leased: RunRow | None) -> None:
        """Give the run leased to the taker, or give its slot back."""
        taker, self.taker = self.taker, None
        if taker is None:
            return
        if leased is not None and leased.lease_owner == taker.worker_id:
            taker.give(leased)
        else:
            taker.give_back()


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
