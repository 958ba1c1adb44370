"""`LeaseKeeper`: renews a worker's leases from a thread of its own, and
watches the worker's event loop.

A workflow that computes for seconds without awaiting blocks the event loop,
and with it anything the loop would run, a heartbeat included: its lease
would expire and another worker would take the run over while it is still
computing. So leases are renewed from a thread with its own event loop and its
own connection to the store (a second `Store` on the same database and clock).
Renewal stays fenced: it extends a lease only where the run, the epoch and the
owner still match, so it never brings back a lease that was lost. The leases
found lost are handed back to the worker on its loop, and so are the held
runs someone asked to cancel (asked at every renewal and at least every
second), which stop at their next call boundary. Each renewal also stores,
under the same fence, the started markers of the calls each held run has in
flight and has not journaled (see `track`): a worker that dies mid-call
leaves its attempt counted, at no commit of its own.

The same thread records the worker's process, holds its presence lock where
the database has one (PostgreSQL: freed by the server when the worker's
session ends; looked at every quarter second, and taken back at once when its
connection dropped), and every quarter second ends the leases of other workers
it can tell have died (on this machine their process gone; anywhere their
presence lock free, untaken, for `presence_grace`: see store/_holders.py),
then wakes its worker: a SIGKILLed worker's runs are taken over within about
two seconds, not after their lease. The first of those looks (with the
presence lock's first take and the thread's own connection) is made before
the keeper's `start` returns, so a worker started after another died takes
its runs with its first claim. Holders it cannot judge keep their leases
until they run out.

A worker is not sure it holds its own leases while its presence lock is lost,
or once its last renewal is too old: the keeper says so to its `Standing`,
and its runs start no call that reaches outside until the lock is back and
every lease renewed (see stead/worker/standing.py). So a dropped connection
makes a live worker pause for a moment, never lose its runs.

The same thread watches the loop: a probe it posts every tick must run within
`blocked_after` seconds, or it logs which run holds the loop and in which
call. CPU-bound work belongs in a sync step (it runs in a thread) or a process
pool (see docs/concepts/journal.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Sequence
from types import FrameType
from typing import Any, TypeVar

from stead import errors, logs, processes
from stead.metrics import meters
from stead.metrics.meters import Takeover
from stead.records import Fence, Presence
from stead.store import open_store
from stead.store.base import Store
from stead.worker.standing import Standing

log = logging.getLogger("stead.worker")
T = TypeVar("T")

# How often the thread looks at the loop (and whether a renewal is due).
_TICK = 0.1
# How often, at most, it asks whether someone asked to cancel a held run
# (a cancel reaches a running run this soon, at its next call boundary).
_CANCEL_CHECK = 1.0
# Frames of these files (asyncio's, and all of stead's) are machinery, not
# the call that blocks.
_MACHINERY = (os.path.dirname(asyncio.__file__),
              os.path.dirname(os.path.dirname(__file__)))
# How often it looks for leases held by workers that have died (see
# store/_holders.py), which end then rather than run out: every quarter
# second in a small fleet. Each look reads every holder, so in a larger one
# each worker looks less often, the fleet as a whole about _FLEET_LOOKS times
# a second (see `LeaseKeeper._next_look`): a death is still seen as soon,
# by whichever worker looks first, and the looks cost the database and the
# workers what a fleet of four costs, not a share growing with the square of
# the fleet (bench/RESULTS.md, the many-workers section).
_DEAD_CHECK = 0.25
_FLEET_LOOKS = 16.0
# How often it looks whether its presence lock is still held: a dropped
# connection is found and the lock taken back within this, well inside the
# grace a claimer gives a holder whose lock it finds free.
_PRESENCE_CHECK = 0.25
# Prefix of the names of the tasks that execute a run (see `task_name`).
_RUN_TASK = "stead run "


def task_name(run_id: str) -> str:
    """The name of a task executing run `run_id`: a blocked loop is blamed on it."""
    return _RUN_TASK + run_id


class LeaseKeeper:
    def __init__(
        self, store: Store, lease_seconds: float, *,
        on_lost: Callable[[list[Fence]], None], blocked_after: float = 1.0,
        on_cancel: Callable[[list[str]], None] | None = None,
        worker_id: str | None = None, on_freed: Callable[[], None] | None = None,
        standing: Standing | None = None, presence_grace: float = processes.PRESENCE_GRACE,
        fleet: Callable[[], int] | None = None,
    ) -> None:
        self._store = store
        # How many live workers look for dead holders beside this one (read
        # from this keeper's thread; None: as if alone).
        self._fleet = fleet
        # Whether the worker is sure it holds its leases (told here; see
        # stead/worker/standing.py), and how long another worker's presence
        # lock must stay free before this one takes it for dead.
        self.standing = standing if standing is not None else Standing(lease_seconds)
        self._grace = presence_grace
        # The presence lock as last found; None until first looked at.
        self._presence: Presence | None = None
        # The store whose session holds the lock (None: none does). It is
        # kept there: a twin that connects later would find the key taken
        # by that session, its own worker, and call the lock lost for good.
        self._presence_on: Store | None = None
        self._renewal_failed = False  # whether the last renewal met a store error
        # The worker these leases are for: with it, the keeper records the
        # worker's process and ends the leases of dead holders, then tells
        # the worker (`on_freed`, on its loop) that their runs are claimable.
        self._worker_id = worker_id
        self._on_freed = on_freed
        self._lease = lease_seconds
        self._on_lost = on_lost
        # Told, on the worker's loop, which held runs someone asked to cancel.
        self._on_cancel = on_cancel
        self._blocked_after = blocked_after
        # The fences held, each with how to ask its execution for the started
        # markers of its calls in flight (None until it has one: the renewal
        # then leaves the run's stored markers as they are).
        self._fences: dict[Fence, Callable[[], str | None] | None] = {}
        # And how to ask it whether its last write is sent (see `track`).
        self._ending: dict[Fence, Callable[[], bool]] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._own_loop: asyncio.AbstractEventLoop | None = None
        self._halt: asyncio.Event | None = None
        self._finished: asyncio.Future[None] | None = None
        # The loop probe: when the pending one was posted; the last one answered.
        self._sent: float | None = None
        self._answered: float | None = None
        self._reported = False
        self._blamed: str | None = None  # the run the last blocked loop was blamed on

    # -- the worker's side (its event loop) -----------------------------------
    def hold(self, fence: Fence) -> None:
        with self._lock:
            self._fences.setdefault(fence, None)

    def track(self, fence: Fence, in_flight: Callable[[], str | None],
              ending: Callable[[], bool]) -> None:
        """Store what `in_flight()` returns (the started markers of the run's
        calls in flight; called from this keeper's thread, so it must be
        thread-safe) with each renewal of `fence`: a worker that dies mid-call
        leaves its attempt counted (see `Execution.in_flight`). `ending()`
        (thread-safe too) says whether the attempt's last write is sent: a
        renewal that then finds the lease gone leaves the judgement to that
        write (see `Execution.ending`), rather than stop a run whose finish
        committed before its answer came back."""
        with self._lock:
            if fence in self._fences:
                self._fences[fence] = in_flight
                self._ending[fence] = ending

    def drop(self, fence: Fence) -> None:
        with self._lock:
            self._fences.pop(fence, None)
            self._ending.pop(fence, None)

    async def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.standing.bind(loop)
        self.standing.renewed(time.monotonic())  # nothing held yet: nothing to lose
        ready: asyncio.Future[None] = loop.create_future()
        self._finished = loop.create_future()
        if self._worker_id is not None:
            try:
                await self._store.record_process(self._worker_id)
            except errors.StoreError as exc:  # its leases then run out as before
                log.warning("could not record worker %s's process: %s", self._worker_id, exc)
        threading.Thread(target=self._main, args=(ready,), name="stead-leases",
                         daemon=True).start()
        await ready

    async def stop(self) -> None:
        own, halt, finished = self._own_loop, self._halt, self._finished
        if own is None or halt is None or finished is None:
            return
        with contextlib.suppress(RuntimeError):  # its loop has ended already
            own.call_soon_threadsafe(halt.set)
        await asyncio.shield(finished)
        if self._worker_id is not None:
            with contextlib.suppress(errors.StoreError):
                await self._store.forget_process(self._worker_id)

    # -- the thread's side ------------------------------------------------------
    def _main(self, ready: asyncio.Future[None]) -> None:
        logs.current_worker.set(self._worker_id)  # a thread starts with a context of its own
        try:
            asyncio.run(self._keep(ready))
        except Exception:  # the thread must end, and say why
            log.exception("the lease keeper stopped")
        finally:
            self._post(_settle, ready)  # stopped before its first look: let the worker on
            self._post(_settle, self._finished)

    def _post(self, fn: Callable[..., object], *args: object) -> bool:
        """Run `fn(*args)` on the worker's loop; False if it is closed."""
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            return False
        return True

    async def _keep(self, ready: asyncio.Future[None]) -> None:
        self._own_loop = asyncio.get_running_loop()
        halt = self._halt = asyncio.Event()
        twin: Store | None = None
        interval = self._lease / 3
        due = time.monotonic() + interval
        asked = time.monotonic() + _CANCEL_CHECK
        looked = present = time.monotonic()
        try:
            if self._worker_id is not None:
                # Before the worker's first claim, not beside it: the twin's
                # connection, the presence lock, and the leases of the dead
                # ended, so that claim already takes a dead worker's runs
                # (no wake-up, no second claim), and none of this work (each
                # statement a hand-off of the interpreter's lock between
                # threads, a wait for a core each on a loaded machine) falls
                # into the replay of the first run claimed.
                twin = await self._keep_presence(twin)
                present = time.monotonic() + _PRESENCE_CHECK
                twin = await self._end_dead(twin, wake=False)
                looked = min(time.monotonic() + _DEAD_CHECK,
                             self._store_for(twin).absences_end(self._grace) or math.inf)
            self._post(_settle, ready)
            while not halt.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(halt.wait(), _TICK)
                if not self._watch():
                    break  # the worker's loop is closed: no one to keep leases for
                if self._worker_id is not None and time.monotonic() >= present \
                        and not halt.is_set():
                    twin = await self._keep_presence(twin)
                    lost = self._presence == Presence.LOST
                    present = time.monotonic() + (_TICK if lost else _PRESENCE_CHECK)
                    if self._presence == Presence.TAKEN:
                        due = time.monotonic() + interval  # `_keep_presence` renewed them all
                if time.monotonic() >= due and not halt.is_set():
                    due = time.monotonic() + interval
                    asked = time.monotonic() + _CANCEL_CHECK
                    twin = await self._renew(twin)
                elif time.monotonic() >= asked and not halt.is_set():
                    asked = time.monotonic() + _CANCEL_CHECK
                    twin = await self._renew(twin, extend=False)
                if time.monotonic() >= looked and not halt.is_set():
                    twin = await self._end_dead(twin)
                    # Sooner if a holder's grace ends before the next look.
                    looked = min(time.monotonic() + self._next_look(),
                                 self._store_for(twin).absences_end(self._grace) or math.inf)
        finally:
            if twin is not None:
                if self._presence_on is twin:  # closed now: a restart takes the lock anew
                    self._presence_on = None
                with contextlib.suppress(errors.SteadError):
                    await twin.close()

    def _next_look(self) -> float:
        """Seconds until the next look for dead holders: `_DEAD_CHECK` while
        the fleet looks no more than `_FLEET_LOOKS` times a second so; past
        that, each worker's share of those looks, at a random point of its
        interval so that workers started together do not look together."""
        workers = 1 + (self._fleet() if self._fleet is not None else 0)
        every = workers / _FLEET_LOOKS
        if every <= _DEAD_CHECK:
            return _DEAD_CHECK
        return random.uniform(0.5, 1.5) * every

    async def _renew(self, twin: Store | None, *, extend: bool = True) -> Store | None:
        """Renew the leases held (unless not `extend`), and hand the worker
        those lost and those of runs someone asked to cancel."""
        with self._lock:
            sources = dict(self._fences)
            endings = dict(self._ending)
        fences = list(sources)
        if not fences and extend:
            self.standing.renewed(time.monotonic())  # nothing held: nothing to lose
            self._renewal_failed = False
        if not fences or (not extend and self._on_cancel is None):
            return twin
        if twin is None:
            twin = await self._open_twin()
        store = twin if twin is not None else self._store
        sent = time.monotonic()
        try:
            gone = await self._on(store, store.renew(fences, self._lease, {
                f: ask() for f, ask in sources.items() if ask is not None})) if extend else []
            # Asked after the renewal's answer: an attempt ending by then sent
            # nothing live since, and its last write is fenced.
            lost = [f for f in gone if not (f in endings and endings[f]())]
            if extend:
                self.standing.renewed(sent)
                meters.renewed(len(fences) - len(gone), len(lost))
            self._renewal_failed = False
            held = [f.run_id for f in fences if f not in gone]
            cancelled = await self._on(store, store.cancel_requests(held)) \
                if held and self._on_cancel is not None else []
        except errors.StoreError as exc:
            log.warning("could not renew %d lease(s) or read cancel requests: %s",
                        len(fences), exc)
            self._renewal_failed = True
            return twin
        if lost:
            self._post(self._on_lost, lost)
        if cancelled and self._on_cancel is not None:
            self._post(self._on_cancel, cancelled)
        return twin

    async def _keep_presence(self, twin: Store | None) -> Store | None:
        """Look whether the presence lock is held, take it back if it was
        lost, and tell the worker's `Standing`: a worker that has it back is
        sure of its leases again only once each was renewed since."""
        assert self._worker_id is not None
        if twin is None:
            twin = await self._open_twin()
        store = self._presence_on or self._store_for(twin)
        was = self._presence
        try:
            now = await self._on(store, store.keep_presence(self._worker_id))
            # Found LOST, that store's session holds nothing now: the next
            # look may take the lock on the twin. After an error it may hold
            # it still, so the next look asks that store again.
            self._presence_on = None if now == Presence.LOST else store
        except errors.StoreError as exc:
            log.warning("worker %s could not hold its presence lock: %s", self._worker_id, exc)
            now = Presence.LOST
            self._presence_on = store
        if now == Presence.LOST:
            if was != Presence.LOST:
                log.warning("worker %s lost its presence lock: its runs start no new call "
                            "until it has it back", self._worker_id)
            self.standing.absent()
        elif now == Presence.TAKEN and was is not None:
            # Taken back: claimers elsewhere may have taken this worker for
            # dead meanwhile. Its runs go on once every lease is renewed (a
            # lease found lost stops its run).
            self.standing.absent()
            before = len(self._fences)
            twin = await self._renew(twin)
            if self._renewal_failed:
                now = Presence.LOST  # not sure yet: look again at the next tick
            else:
                log.info("worker %s has its presence lock back; its %d lease(s) renewed",
                         self._worker_id, before)
                self.standing.present()
        else:
            self.standing.present()
        self._presence = now
        return twin

    def _store_for(self, twin: Store | None) -> Store:
        return twin if twin is not None else self._store

    async def _end_dead(self, twin: Store | None, *, wake: bool = True) -> Store | None:
        """End the leases of holders found dead, and wake the worker if any
        (unless not `wake`: it has not claimed yet)."""
        if self._worker_id is None:
            return twin
        if twin is None:
            twin = await self._open_twin()
        store = self._store_for(twin)
        try:
            gone = await self._on(store, store.end_dead_leases(self._worker_id,
                                                               grace=self._grace))
        except errors.StoreError as exc:
            log.warning("could not look for dead lease holders: %s", exc)
            return twin
        if gone:
            meters.takeover(Takeover.DEAD_WORKER, len(gone))
            log.info("ended the leases of %d dead worker(s): %s", len(gone), ", ".join(gone))
            if self._on_freed is not None and wake:
                self._post(self._on_freed)
        return twin

    async def _on(self, store: Store, call: Coroutine[Any, Any, T]) -> T:
        """Await `call` here, or, on a private database (no twin), on the
        worker's loop: only the worker's own store can reach it."""
        if store is not self._store:
            return await call
        assert self._loop is not None
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call, self._loop))

    async def _open_twin(self) -> Store | None:
        if ":memory:" in self._store.url:
            return None
        try:
            return await open_store(self._store.url, clock=self._store.clock,
                                    lease_clock=self._store.database.lease_clock,
                                    retry_for=self._lease / 3, existing=True)
        except errors.StoreError as exc:
            log.warning("could not connect to renew leases: %s", exc)
            return None

    # -- the loop watch ---------------------------------------------------------
    def _watch(self) -> bool:
        """Probe the worker's loop; False if it is closed."""
        now = time.monotonic()
        sent = self._sent
        if sent is None or self._answered == sent:
            if self._reported and sent is not None:
                meters.loop_blocked(now - sent)
                log.warning("event loop free again after %.1f s", now - sent,
                            extra={"run_id": self._blamed})
            self._reported = False
            self._sent = now
            return self._post(self._answer, now)
        if not self._reported and now - sent >= self._blocked_after:
            self._reported = True
            run_id, call = self._culprit()
            self._blamed = run_id
            log.warning(
                "event loop blocked for %.1f s by %s, in %s: nothing else on this worker "
                "runs meanwhile. Do CPU-bound work in a sync step (run.step with a plain "
                "function runs in a thread) or a process pool", now - sent,
                f"run {run_id}" if run_id else "code outside any run", call,
                extra={"run_id": run_id},
            )
        return True

    def _answer(self, sent: float) -> None:
        self._answered = sent

    def _culprit(self) -> tuple[str | None, str]:
        """The run whose task holds the loop now, and where its code is."""
        assert self._loop is not None
        task = asyncio.current_task(self._loop)
        name = task.get_name() if task is not None else ""
        run_id = name[len(_RUN_TASK):] if name.startswith(_RUN_TASK) else None
        frame = sys._current_frames().get(self._loop_thread)
        return run_id, _where(frame)


def _where(frame: FrameType | None) -> str:
    """The innermost frame of user code (not asyncio's, not stead's)."""
    if frame is None:
        return "unknown code"
    stack: Sequence[traceback.FrameSummary] = traceback.extract_stack(frame)
    for summary in reversed(stack):
        if not summary.filename.startswith(_MACHINERY) and "<frozen" not in summary.filename:
            return f"{summary.name} ({summary.filename}:{summary.lineno})"
    last = stack[-1] if stack else None
    return f"{last.name} ({last.filename}:{last.lineno})" if last else "unknown code"


def _settle(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)
