"""Who holds which run: claims, renewals and releases, and the workers'
processes and heartbeats that tell a live holder from a dead one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stead import processes
from stead.store import _holders, _rows, _sealing, schema_versions
from stead.store.base.part import StorePart
from stead.store.seam import Claim, UnsharedClaim, Writing
from stead.store.transactions import common
from stead.store.transactions import leases as tx

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.queues import Queue
    from stead.records import (
        Backlog,
        Fence,
        HostRow,
        Presence,
        RunRow,
        Stranded,
        WorkerLiveness,
    )
    from stead.records.fleet import Gauges
    from stead.tenants.fair import Policy as TenantPolicy


class Leases(StorePart):
    """The `Store`'s operations on who holds which run."""

    _absences: _holders.Absences  # the holders whose presence lock this store saw free

    async def backlog(self) -> list[Backlog]:
        """What workers could take, by `workflow@version`: runs runnable now,
        and runs leased to a worker (with the soonest lease end)."""
        return await self.database.read(lambda: common.read_all(
            "backlog", {"now": self.clock.now(), "lease_now": self.database.lease_now()},
            _rows.backlog))

    async def leased_runs(self, limit: int = 100) -> list[RunRow]:
        """Runs whose lease has not ended, the soonest end first."""
        return await self.database.read(lambda: common.read_all(
            "leased_runs", {"lease_now": self.database.lease_now(), "limit": limit},
            _rows.run))

    async def lease_now(self) -> float:
        """The time leases are judged at: the database's clock (or the lease
        clock the store was opened with), the one `RunRow.lease_expires_at`
        is on."""
        found = await self.database.read(lambda: common.read_one(
            "lease_now", {"lease_now": self.database.lease_now()}, lambda row: float(row["now"])))
        assert found is not None  # the query always returns its one row
        return found

    async def claim(
        self, worker_id: str, hosted: Sequence[str], lease_seconds: float, limit: int,
        exclude: Sequence[str] = (),
    ) -> list[RunRow]:
        """Take up to `limit` runnable runs whose `workflow@version` is in
        `hosted`, each with a fresh epoch and a lease until now + lease_seconds.
        `exclude` lists runs the caller still executes (a late heartbeat must
        not make a worker take over its own run). Runs in a queue are left to
        `claim_queue`."""
        taken = await self.database.claim(
            Claim(worker_id, hosted, lease_seconds, limit, exclude))
        return await self._claimed(taken)

    async def claim_unshared(
        self, worker_id: str, hosted: Sequence[str], lease_seconds: float, limit: int,
        exclude: Sequence[str] = (),
    ) -> UnsharedClaim:
        """`claim`, taken only while at most one tenant has runs a claim could
        take: the tenants read (as `ready_tenants` reads them, at most two)
        and the runs leased (none when two were read, for a claim shared
        among them). One statement on PostgreSQL: one round trip, not two."""
        got = await self.database.claim_unshared(
            Claim(worker_id, hosted, lease_seconds, limit, exclude))
        return UnsharedClaim(got.tenants, await self._claimed(got.runs))

    async def _claimed(self, taken: list[RunRow]) -> list[RunRow]:
        """Runs just claimed, noted as writing, their sealed fields opened."""
        self.database.holding([r.run_id for r in taken])
        sealer = self.database.sealer
        if sealer is None or not taken:
            return taken
        return await self.database.read(lambda: _sealing.opened_runs(sealer, taken))

    async def ready_tenants(self) -> list[str]:
        """The tenants with runs a claim could take ('' for runs of none), by
        name, at most `MAX_TENANTS`: one index probe each."""
        return await self.database.read(tx.ready_tenants)

    async def claim_fair(
        self, policy: TenantPolicy, worker_id: str, hosted: Sequence[str],
        lease_seconds: float, limit: int, exclude: Sequence[str] = (), turn: int = 0,
        tenants: Sequence[str] | None = None, keep: int = 0,
        held: Mapping[str, int] | None = None,
    ) -> list[RunRow]:
        """`claim`, shared fairly among the tenants with runs ready: the free
        slots go to them by `stead.tenants.fair.shares` (weighted by `policy`,
        each tenant under its limits, counted in the claim's transaction under
        the limited tenants' locks, so they hold across every worker); `turn`
        says which tenant a tie goes to first, `keep` how many of the slots
        only tenants with no run in flight may take, `held` the claiming
        worker's runs in flight by tenant (counted leased until it has seen
        them end; see `tx.claim_fair`). `tenants`: what
        `ready_tenants` just returned (None: read here if some tenant has
        limits, whose locks are taken in their order)."""
        if tenants is None and policy.limited:  # the limited ones' locks are taken in order
            tenants = await self.ready_tenants()
        params: dict[str, Any] = {"worker_id": worker_id, "hosted": list(hosted),
                                  "exclude": list(exclude), "now": self.clock.now(),
                                  "lease_now": self.database.lease_now(),
                                  "lease_seconds": lease_seconds}
        # With limits: one transaction, under the limited tenants' locks, one
        # commit (a commit a tenant would cost a flush each). Without: each
        # tenant's claim is one statement that commits on its own (SKIP
        # LOCKED on PostgreSQL: no BEGIN nor COMMIT, two round trips fewer;
        # a claim that gives nothing writes nothing); the read-back finds
        # whichever of them landed.
        taken = await self.database.write(
            lambda: tx.claim_fair(policy, params, limit, turn, tenants or (), keep, held),
            Writing(landed=lambda _: tx.fair_claimed(params),
                    one_statement=not policy.limited, synced=False),
        )
        self.database.holding([r.run_id for r in taken])
        return taken

    async def claim_queue(
        self, queue: Queue, worker_id: str, hosted: Sequence[str], lease_seconds: float,
        limit: int, exclude: Sequence[str] = (), *, ready: bool = False,
    ) -> list[RunRow]:
        """`claim` for the runs of `queue`: no more than its limits leave room
        for (counted in the claim's transaction, under the queue's lock, so
        they hold across every worker of the database), lowest priority number
        first, then oldest. `ready`: `ready_queues` has just named the queue,
        so it is not read again before the claim."""
        params: dict[str, Any] = {"worker_id": worker_id, "hosted": list(hosted),
                                  "exclude": list(exclude), "now": self.clock.now(),
                                  "lease_now": self.database.lease_now(),
                                  "lease_seconds": lease_seconds}
        # A read first: an idle worker's poll takes no lock and commits nothing.
        if not ready and not await self.queue_ready(queue, hosted, exclude):
            return []
        taken = await self.database.write(
            lambda: tx.claim_queue(queue, params, limit),
            Writing(landed=lambda _: tx.queue_claimed(queue, params), synced=False),
        )
        self.database.holding([r.run_id for r in taken])
        return taken

    async def ready_queues(
        self, queues: Sequence[str], hosted: Sequence[str], exclude: Sequence[str] = (),
    ) -> set[str]:
        """Those of `queues` with a run of `hosted` code (none of `exclude`)
        that is not leased and may run now, their limits aside: in one read,
        so a claim asks once however many queues its app declares."""
        if not queues:
            return set()
        probe = {"queues": list(queues), "hosted": list(hosted), "exclude": list(exclude),
                 "now": self.clock.now(), "lease_now": self.database.lease_now()}
        found = await self.database.read(lambda: tx.ready_queues(probe))
        return set(found)

    async def queue_ready(
        self, queue: Queue, hosted: Sequence[str], exclude: Sequence[str] = (),
    ) -> bool:
        """Whether `queue` has a run of `hosted` code that is not leased and
        may run now (its limits may still hold it back)."""
        return queue.name in await self.ready_queues([queue.name], hosted, exclude)

    async def renew(
        self, fences: Sequence[Fence], lease_seconds: float,
        in_flight: Mapping[Fence, str | None] | None = None,
    ) -> list[Fence]:
        """Extend the leases still held; return the fences that were lost.
        Renewing twice is renewing. `in_flight` gives, for the fences it
        names, the started markers of the calls in flight not yet journaled
        (see `replay.markers_text`; None: none), which a takeover counts as
        died attempts."""
        return await self.database.write(
            lambda: tx.renew(fences, lease_seconds, self.database.lease_now(), in_flight or {}),
            Writing(one_statement=True),
        )

    async def release(self, fence: Fence) -> None:
        """Give the run back (it stays runnable); no-op if already lost."""
        await self.database.write(
            lambda: tx.release(fence, self.clock.now()),
            Writing(one_statement=True, releases=fence.run_id),
        )

    async def record_process(self, worker_id: str) -> None:
        """Record the process `worker_id` runs in (this one), so that claimers
        on this machine can tell when it has died (see `end_dead_leases`)."""
        me, now = processes.this_process(), self.clock.now()
        await self.database.write(lambda: _holders.record(worker_id, me, now), Writing())

    async def keep_presence(self, worker_id: str) -> Presence:
        """Hold `worker_id`'s presence lock, where the database has one
        (PostgreSQL: see store/postgres/presence.py), so claimers on any
        machine can tell when it died. Each time the lock is taken (first,
        or again after its session dropped) the process row counts one more
        take, so a claimer watching the lock free starts its grace again."""
        from stead.records import Presence  # the fleet's records: not for a listing

        state = await self.database.keep_presence(worker_id)
        if state == Presence.TAKEN:
            me, now = processes.this_process(), self.clock.now()
            await self.database.write(lambda: _holders.present(worker_id, me, now), Writing())
        return state

    async def forget_process(self, worker_id: str) -> None:
        await self.database.write(lambda: _holders.forget(worker_id), Writing())

    async def end_dead_leases(self, worker_id: str, *, grace: float = processes.PRESENCE_GRACE,
                              limit: int = 100) -> list[str]:
        """End now the leases of the workers (other than `worker_id`) known
        to be dead, so the next claim takes their runs without waiting their
        leases out; their ids. Dead: on this machine, its process is gone; on
        any machine (PostgreSQL), its presence lock has stayed free, not
        taken again, for `grace` seconds of this store's watch (asked again
        over that time: see store/_holders.py). Others keep their leases."""
        lease_now = self.database.lease_now()
        holders = await self.database.read(
            lambda: _holders.lease_holders(worker_id, lease_now, limit))
        machine = processes.this_process().machine
        gone = _holders.gone(holders, processes.dead, machine)
        # A holder on this machine is judged by its process alone: its presence
        # lock is freed by any dropped connection too.
        elsewhere = [h for h in holders if h.process.machine != machine]
        absent = self._absences.absent(elsewhere, time.monotonic(), grace)
        if not gone and not absent:
            return []
        return await self.database.write(
            lambda: _holders.end_leases(gone, absent, lease_now), Writing())

    def absences_end(self, grace: float) -> float | None:
        """When (monotonic) the soonest holder whose presence lock this store
        watches free may be taken for dead, if it watches one: the time to
        ask `end_dead_leases` again."""
        return self._absences.next_due(grace)

    async def worker_liveness(self, *, grace: float = processes.PRESENCE_GRACE
                              ) -> list[WorkerLiveness]:
        """Whether each worker is alive, dead or cannot be told, and why, by
        the test `end_dead_leases` applies to lease holders, asked of every
        worker that recorded its process: on this machine its process; on
        another (PostgreSQL) its presence lock, dead once free for `grace`
        seconds and not taken again (a lock found free is looked at again
        then, so this may take that long). A worker that did not stop cleanly
        and whose process is no longer recorded was found gone that way. A
        worker that stopped cleanly is not listed."""
        machine = processes.this_process().machine
        watch = _holders.Absences()
        found = await self.database.read(_holders.workers)
        absent = watch.absent([h for h in found.holders if h.process.machine != machine],
                              time.monotonic(), grace)
        due = watch.next_due(grace)
        if due is not None:
            await asyncio.sleep(max(due - time.monotonic(), 0.0))
            found = await self.database.read(_holders.workers)
            absent = watch.absent([h for h in found.holders if h.process.machine != machine],
                                  time.monotonic(), grace)
        return _holders.verdicts(found, processes.running, machine,
                                 {h.worker_id for h in absent}, grace)

    async def heartbeat(self, worker_id: str, served: Sequence[tuple[str, str]], *,
                        policy_version: str | None, live_for: float,
                        forget_after: float = 7 * 24 * 3600.0) -> None:
        """Say `worker_id` is alive for `live_for` seconds more, serves each
        `(workflow@version, role)` (a `HostRole`) and runs `policy_version`
        (None: its app has no policy), which deliveries to waits bound to a
        policy version compare; heartbeats older than `forget_after` seconds
        are dropped."""
        now = self.clock.now()
        release = (schema_versions.stead_version(), schema_versions.latest())
        # Pipelined: a statement for each version served and none read back,
        # so BEGIN, all of them and COMMIT are one round trip on PostgreSQL.
        await self.database.write(
            lambda: tx.heartbeat(worker_id, served, now, now - forget_after, policy_version,
                                 now + live_for, release), Writing(pipelined=True))

    async def host_stopped(self, worker_id: str) -> None:
        """`worker_id` stopped cleanly: it serves nothing any more."""
        now = self.clock.now()
        await self.database.write(lambda: tx.host_stopped(worker_id, now), Writing())

    async def worker_hosts(self, limit: int = 1000) -> list[HostRow]:
        """Every worker's last heartbeat per version it serves, latest first."""
        return await self.database.read(lambda: tx.hosts(limit))

    # -- drains (`stead workers drain`) ------------------------------------------
    # A request is a row of `stead_meta`, keyed by the worker's id: the worker
    # asks for it every `WorkerOptions.drain_check` seconds and removes it as
    # it stops.
    async def request_drain(self, worker_id: str, detail: str) -> None:
        """Ask `worker_id` to stop claiming and release its runs at their next
        boundary, as SIGTERM does; `detail` (JSON text) says who asked and why."""
        await self.database.write(lambda: tx.put_meta(_drain_key(worker_id), detail),
                                  Writing())

    async def drain_requested(self, worker_id: str) -> str | None:
        """The drain request for `worker_id` (its JSON text), if there is one."""
        return await self.database.read(lambda: common.read_one(
            "get_meta", {"key": _drain_key(worker_id)}, lambda row: str(row["value"])))

    async def forget_drain(self, worker_id: str) -> None:
        await self.database.write(lambda: tx.delete_meta(_drain_key(worker_id)), Writing())

    async def gauges(self, soon: float = 3600.0) -> Gauges:
        """The live runs by status, the claimable runs by queue and the open
        waits (those expiring within `soon` seconds apart), as a metrics scrape
        reports them: a few aggregates over partial indexes, never the ended runs."""
        now, lease_now = self.clock.now(), self.database.lease_now()
        return await self.database.read(lambda: tx.gauges(now, now + soon, lease_now))

    async def stranded_runs(self, grace: float, limit: int = 100,
                            workflow: str | None = None) -> list[Stranded]:
        """Runnable runs (of `workflow`, if given) that no worker has served
        for `grace` seconds (and that have waited at least that long), oldest first."""
        now, lease_now = self.clock.now(), self.database.lease_now()
        return await self.database.read(
            lambda: tx.stranded(now, now - grace, limit, lease_now, workflow))


def _drain_key(worker_id: str) -> str:
    return f"drain:{worker_id}"
