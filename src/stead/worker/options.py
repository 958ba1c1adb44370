"""`WorkerOptions`: how many runs a worker holds, its lease, its polls and
pauses, its heartbeat and the largest result it journals."""

from __future__ import annotations

import dataclasses

from stead import bounds, processes

# The fewest slots on which a worker keeps one for a newcomer tenant by
# default. A kept slot stays free while the tenants with runs ready hold
# alike (none of them may take it), so it costs up to one slot of each
# worker: a tenth or less of this one's. On smaller workers that cost is the
# fleet's: single-slot workers, each keeping its only slot, would run two
# tenants' backlogs two runs at a time however many workers there were.
AUTO_HEADROOM_FROM = 10


@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    concurrency: int = 16
    lease_seconds: float = 30.0
    # Idle workers wake at once on PostgreSQL (NOTIFY) and SQLite (data_version);
    # the poll catches timers that come due.
    poll_interval: float = 0.2
    shutdown_grace: float = 10.0
    worker_id: str | None = None
    # A run parked on a wait or timer further away than this is suspended
    # (lease released, no worker held); nearer ones sleep in the process.
    suspend_after: float = 1.0
    # After a store error, this worker leaves the run alone this long (doubling
    # with each error in a row, up to the lease) and pauses its claims alike.
    store_backoff: float = 1.0
    # An event loop held this long by one call (no await) is logged.
    blocked_after: float = 1.0
    # The largest result (of a step, effect or model call) journaled, as JSON:
    # a larger one raises `ResultTooLarge` in the workflow, naming the call.
    max_result_bytes: int = 16 * 1024 * 1024
    # How often the worker tells the store which versions it serves (see
    # `Store.heartbeat`); one not heard from for 3 heartbeats is taken as gone.
    heartbeat: float = 10.0
    # How long another worker's presence lock (PostgreSQL) must stay free, not
    # taken again, before this one takes that worker for dead and ends its
    # leases: longer than a live worker takes to find its presence connection
    # dropped and take the lock back, so a blip, a pooler restart or a failover
    # moves no run (see docs/guides/platform/many-workers.md).
    presence_grace: float = processes.PRESENCE_GRACE
    # How often the worker asks the store whether `stead workers drain` asked
    # it to stop (one primary-key read).
    drain_check: float = 0.5
    # While runs of more than one tenant are ready (or a tenant has limits),
    # this many of the worker's slots go only to tenants with no run in
    # flight, so that a tenant starting a run beside another's backlog is
    # claimed at once (docs/guides/platform/many-customers.md); 0: none.
    # None: one on a worker of `AUTO_HEADROOM_FROM` slots or more, none on a
    # smaller one (see `headroom`).
    tenant_headroom: int | None = None
    # Runs that hold their slots no longer than this (the median of the last
    # to end and of those in flight) free them together, in waves: while more
    # slots are busy with such runs than are free, every free slot is kept for
    # tenants with no run in flight, and a busy tenant's runs are claimed with
    # the rest of the wave (see `Claims._kept`); 0: only the headroom is kept.
    tenant_headroom_hold: float = 0.01
    # Before its first claim, the worker freezes what its process holds
    # (`gc.freeze`, once per process): the modules and app it warmed up
    # then stay out of the collector's full passes, which otherwise hold the
    # event loop 10 ms and more each (see `stead.worker.heap`). False: leave
    # the process's collector alone.
    freeze_heap: bool = True

    def __post_init__(self) -> None:
        bounds.integer(self.concurrency, "WorkerOptions.concurrency", least=1,
                       most=bounds.MAX_INT32)
        bounds.integer(self.max_result_bytes, "WorkerOptions.max_result_bytes", least=1)
        if self.tenant_headroom is not None:
            bounds.integer(self.tenant_headroom, "WorkerOptions.tenant_headroom", least=0,
                           most=bounds.MAX_INT32)
        bounds.optional_text(self.worker_id, "WorkerOptions.worker_id")
        for name in ("lease_seconds", "poll_interval", "heartbeat", "blocked_after",
                     "presence_grace", "drain_check"):
            bounds.seconds(getattr(self, name), f"WorkerOptions.{name}")
        for name in ("shutdown_grace", "store_backoff", "suspend_after", "tenant_headroom_hold"):
            bounds.seconds(getattr(self, name), f"WorkerOptions.{name}", zero=True)

    @property
    def headroom(self) -> int:
        """The slots this worker keeps for a tenant with no run in flight
        while several tenants have runs ready: `tenant_headroom`, or by
        default one on a worker of `AUTO_HEADROOM_FROM` slots or more."""
        if self.tenant_headroom is not None:
            return self.tenant_headroom
        return 1 if self.concurrency >= AUTO_HEADROOM_FROM else 0
