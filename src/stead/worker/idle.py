"""When a worker working until idle, or until some runs are done, may stop:
nothing left that it could claim now or soon, or each run settled."""

from __future__ import annotations

import logging

from stead.app import App
from stead.records import STOPPED, TERMINAL, RunRow, RunStatus
from stead.store.base import Store

log = logging.getLogger("stead.worker")


async def nothing_left(store: Store, app: App, worker_id: str, lease_seconds: float,
                       seen: dict[tuple[str, int], float | None]) -> bool:
    """Whether there is nothing to wait for, once no run executes here: no
    hosted run leased to another worker that has not renewed the lease
    since `seen` (its first sighting) and will lose it within a lease
    time. Our own leftovers (an execution that died) are not waited for.
    A lease seen before that is gone now (it ran out, or ended before it
    would have: released by its holder, or ended for a dead holder) may
    have gone after the last claim looked: one more claim is made before
    the worker is idle."""
    if await store.ready_queues(list(app.queues), app.hosted()):
        return False  # runs its queues' limits hold back for now
    hosted = set(app.hosted())
    leased = await store.leased_runs()
    # The clock lease ends are on, read after the leases: one that ends
    # between the two reads is still listed, and waited for.
    now = await store.lease_now()
    horizon = now + lease_seconds
    waiting = False
    current = {(row.run_id, row.epoch) for row in leased}
    gone = [key for key in seen if key not in current]
    for key in gone:
        del seen[key]
    if gone:
        return False
    for row in leased:
        if f"{row.workflow}@{row.version}" not in hosted or row.lease_owner == worker_id:
            continue
        key = (row.run_id, row.epoch)
        expires = row.lease_expires_at
        if key not in seen:
            seen[key] = expires
            log.info("worker %s: run %s is leased to %s for %.1fs more; waiting to see "
                     "whether that worker renews the lease", worker_id, row.run_id,
                     row.lease_owner, (expires or now) - now)
        if expires is not None and expires <= horizon and expires == seen[key]:
            waiting = True  # not renewed since first seen: its worker is likely gone
    return not waiting


async def settled(store: Store, row: RunRow) -> bool:
    """Ended, stopped for a decision, or waiting for an event (not a timer)."""
    if row.status in TERMINAL or row.status in STOPPED:
        return True
    if row.status != RunStatus.WAITING:
        return False
    from stead.records import WaitState  # a waiting run's

    return bool(await store.list_waits(run_id=row.run_id, state=WaitState.OPEN,
                                            limit=1))
