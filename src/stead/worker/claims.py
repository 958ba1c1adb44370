"""`Claims`: what a worker claims and how much at a time. Its heartbeat tells
the store which versions it serves and learns which other live workers
serve the same (the versions it migrates are those no other live worker
hosts); with such peers a claim takes a small batch, so a burst of runs
spreads across the fleet; the app's queues take turns to claim first."""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from stead import errors
from stead.app import App
from stead.clock import Clock
from stead.records import HostRole, HostRow, RunRow
from stead.store.base import Store
from stead.tenants import NONE, fair
from stead.worker.holds import Holds
from stead.worker.options import WorkerOptions

if TYPE_CHECKING:
    from stead.queues import Queue

log = logging.getLogger("stead.worker")
# Every tenant weighs one and has no limit: an app that declares none.
_EQUAL = fair.Policy()
# Once several tenants have runs ready, claims share among them this long
# (seconds) before the worker reads again whether they still do.
_FAIR_FOR = 0.5
# Claims share on while one tenant (not runs of none) has runs ready this
# long (seconds) after several last had: a tenant whose runs each end before
# its next starts is between runs, not gone, and keeps its headroom.
_FAIR_LINGER = 5.0
# Among quick runs (`WorkerOptions.tenant_headroom_hold`), one in flight this
# many times that hold is a long one, not part of the coming wave: a wave's
# runs stretch past the hold on a loaded event loop, an agent's run lasts
# seconds.
_WAVE_WITHIN = 10
# How often a worker makes the coming days' journal partitions (PostgreSQL):
# they are made days ahead, so one worker of a fleet doing it hourly is plenty.
_DAYS_EVERY = 3600.0
# After a failed try, the next one (seconds).
_DAYS_AGAIN = 60.0


class Claims:
    """One worker's claims: its heartbeat, its peers and its turn among the queues."""

    def __init__(self, app: App, store: Store, clock: Clock, worker_id: str,
                 options: WorkerOptions,
                 stop_for: Callable[[str, errors.SteadError], None],
                 holds: Holds | None = None) -> None:
        self.app = app
        self.store = store
        self.clock = clock
        self.worker_id = worker_id
        self.options = options
        # Stops the worker for a reason no retry mends (the schema moved past its code).
        self.stop_for = stop_for
        # How long this worker's runs hold their slots (the worker's loop
        # tells it; one it does not tell knows none, and keeps the headroom).
        self.holds = holds or Holds(options.concurrency)
        self._window_said = False
        # What this worker claims: the versions it hosts, and those it can
        # migrate to one of them that no other live worker hosts (refreshed
        # at each heartbeat).
        self.claimable: list[str] = app.hosted()
        # Other live workers that claim some of the same versions (refreshed
        # at each heartbeat): with any, claims come in small batches (`batch`).
        self.peers = 0
        self._queue_turn = 0  # which of the app's queues the next claim starts with
        # Which tenant a tie among tenants goes to first, moved on at each
        # claim. Each worker starts at a place of its own: on PostgreSQL
        # workers claiming at once read the same loads, and with one start
        # every one of them would give its slots to the same tenant.
        self._tenant_turn = zlib.crc32(worker_id.encode())
        self._fair_until = 0.0  # claims share among tenants until then (monotonic)
        self._several_at = -_FAIR_LINGER  # when several tenants last had runs ready
        self._days_at: float | None = None  # when this worker last tried making the days
        self._days_wait = _DAYS_EVERY  # and how long after that it tries again

    async def heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.options.heartbeat)
            await self.beat()

    async def beat(self) -> None:
        """Tell the store which versions this worker serves, after deciding
        which it migrates: those no other live worker hosts (a run goes on
        on its own version while one does)."""
        migrated = self.app.migrated()
        try:
            now = self.clock.now()
            live = [h for h in await self.store.worker_hosts()
                    if h.worker_id != self.worker_id and self.alive(h, now)]
            others = {h.code for h in live if h.role == HostRole.HOSTS}
            migrated = [code for code in migrated if code not in others]
            self.claimable = [*self.app.hosted(), *migrated]
            claimable = set(self.claimable)
            peers = len({h.worker_id for h in live if h.code in claimable})
            if peers != self.peers:
                log.info("worker %s shares its versions with %d other live worker(s)",
                         self.worker_id, peers)
            self.peers = peers
            policy = self.app.current_policy
            await self.store.heartbeat(
                self.worker_id, [*((c, HostRole.HOSTS) for c in self.app.hosted()),
                          *((c, HostRole.MIGRATES) for c in migrated)],
                policy_version=None if policy is None else policy.version,
                live_for=3 * self.options.heartbeat)
        except errors.StoreError as exc:
            log.warning("worker %s could not send its heartbeat: %s", self.worker_id, exc)
        await self.make_days()
        await self.check_schema()

    async def make_days(self) -> None:
        """Make the journal's partitions of today and the coming days
        (PostgreSQL), hourly. A day no one made in time still takes its runs
        (in `journal_dated_other`, moved into the day's partition when made)."""
        now = self.clock.now()
        if self._days_at is not None and abs(now - self._days_at) < self._days_wait:
            return
        self._days_at = now
        try:
            await self.store.add_days(now)
            self._days_wait = _DAYS_EVERY
        except errors.StoreError as exc:
            # Tried again in a minute, not at every heartbeat: each try may
            # queue for a lock behind a long transaction (for its lock_timeout).
            self._days_wait = _DAYS_AGAIN
            log.warning("worker %s could not make the coming days' partitions (tried again "
                        "in %g s): %s", self.worker_id, _DAYS_AGAIN, exc)

    async def check_schema(self) -> None:
        """Stop claiming once the database was migrated past what this
        worker's code can work with (see `Store.check_schema`); say once when
        it works inside the compatibility window."""
        try:
            window = await self.store.check_schema()
        except errors.SchemaAhead as exc:
            self.stop_for(str(exc), exc)
        except errors.StoreError as exc:
            log.warning("worker %s could not read the schema's version: %s", self.worker_id, exc)
        else:
            if window is not None and not self._window_said:
                self._window_said = True
                log.warning("worker %s: %s", self.worker_id, window)

    def alive(self, host: HostRow, now: float) -> bool:
        """Whether `host` is live, judged by the interval it published (its own
        `live_until`): workers of one fleet may beat at different rates. A row
        without one (written before workers published it) falls back to this
        worker's own interval."""
        if host.stopped_at is not None:
            return False
        if host.live_until is not None:
            return host.live_until > now
        return host.seen_at > now - 3 * self.options.heartbeat

    def batch(self, free: int) -> int:
        """How many runs one claim takes: every free slot when this worker is
        alone; with live peers a quarter of its fair share of the free slots
        (at least one), so that the first worker to wake does not take a
        whole burst while the others stay idle."""
        if self.peers == 0:
            return free
        return max(1, free // (4 * (self.peers + 1)))

    async def claim(self, free: int, exclude: list[str], spare: int = 0) -> list[RunRow]:
        """Runs of the app's queues first (each under its limits), then runs
        in no queue, up to `free`, shared among tenants by the app's weights
        and under their limits (`App.tenant`). `spare`: the worker's free
        slots beyond `free`, which this claim leaves."""
        # The versions it hosts, and those it migrates that no other live worker hosts.
        hosted, lease = self.claimable, self.options.lease_seconds
        claimed: list[RunRow] = []
        queues = self.queues()
        # One read names the queues with work: a claim of each queue in turn
        # would ask each first, a round trip per queue declared, however idle.
        ready = await self.store.ready_queues([q.name for q in queues], hosted, exclude)
        for queue in queues:
            if queue.name in ready and len(claimed) < free:
                claimed += await self.store.claim_queue(
                    queue, self.worker_id, hosted, lease, free - len(claimed), exclude,
                    ready=True)
        if len(claimed) < free:
            claimed += await self._claim_rest(hosted, free - len(claimed), exclude, spare)
        return claimed

    async def _claim_rest(self, hosted: list[str], free: int, exclude: list[str],
                          spare: int) -> list[RunRow]:
        """Runs in no queue: shared fairly among tenants when more than one
        has runs ready (or had, within `_FAIR_LINGER`, and a tenant still
        has) or a tenant has limits, keeping slots for newcomers (`_kept`),
        else the plain claim, oldest first. With no tenant limited and none
        shared lately, the plain claim itself reads whether several tenants
        have runs ready (`Store.claim_unshared`)."""
        lease = self.options.lease_seconds
        policy = self.app.tenant_policy or _EQUAL
        now = time.monotonic()
        tenants: list[str] | None = None
        if not policy.limited and now >= max(self._fair_until, self._several_at + _FAIR_LINGER):
            # Nothing shared lately: the plain claim, in the statement that reads
            # whether several tenants have runs ready now (then it takes none).
            got = await self.store.claim_unshared(self.worker_id, hosted, lease, free,
                                                  exclude=exclude)
            tenants = got.tenants
            if len(tenants) > 1:  # claim fairly, without asking again for a while
                self._fair_until, self._several_at = now + _FAIR_FOR, now
            if len(tenants) <= 1 or got.runs:  # runs leased (a read-back's) are its own
                return got.runs
        elif policy.limited or now >= self._fair_until:
            tenants = await self.store.ready_tenants()
            if len(tenants) > 1:  # claim fairly, without asking again for a while
                self._fair_until = now + _FAIR_FOR
                self._several_at = now
            elif tenants != [NONE] and now < self._several_at + _FAIR_LINGER:
                self._fair_until = now + _FAIR_FOR
        several = now < self._fair_until
        if policy.limited or several:
            self._tenant_turn += 1
            keep = self._kept(free, spare, now) if several else 0
            taken = await self.store.claim_fair(
                policy, self.worker_id, hosted, lease, free, exclude=exclude,
                turn=self._tenant_turn, tenants=tenants, keep=keep,
                held=self.holds.held())
            self.holds.claimed_fairly(taken)
            return taken
        return await self.store.claim(self.worker_id, hosted, lease, free, exclude=exclude)

    def _kept(self, free: int, spare: int, now: float) -> int:
        """How many of the `free` slots this claim gives only to tenants with no
        run in flight (or fewer per weight than another), while several tenants
        have runs ready: the worker's last `WorkerOptions.headroom`
        (`spare`: its free slots this claim leaves). Runs that hold their slots
        no longer than `WorkerOptions.tenant_headroom_hold` free them together,
        a claim's worth at a time: while more of them are in flight (claimed
        within `_WAVE_WITHIN` such holds) than slots are free, every free slot
        is kept, so that a busy tenant's next runs are claimed with the rest of
        the wave (one claim and one commit for them all), not one by one as
        each slot frees; a newcomer is claimed at once either way. Runs held
        longer bring no wave: beside them the free slots are given as usual."""
        headroom, quick = self.options.headroom, self.options.tenant_headroom_hold
        if headroom and quick \
                and self.holds.in_flight_within(_WAVE_WITHIN * quick, now) > free + spare \
                and not self.holds.longer_than(quick, now):
            return free
        return min(max(headroom - spare, 0), free)

    def queues(self) -> list[Queue]:
        """The app's queues, starting one further at each claim, so that a
        busy queue does not always take the free slots before the others."""
        declared = list(self.app.queues.values())
        if not declared:
            return declared
        self._queue_turn = (self._queue_turn + 1) % len(declared)
        return declared[self._queue_turn:] + declared[:self._queue_turn]
