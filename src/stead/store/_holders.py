"""Flows for dead lease holders: a worker records its process, and a
claimer ends the leases of holders whose presence lock the server freed
(PostgreSQL, any machine: see postgres/presence.py) or, on the same machine,
whose process is gone (see stead/processes.py), so their runs are taken at
the next claim instead of after the lease. Holders it cannot judge keep
their leases until they end."""

from __future__ import annotations

from collections.abc import Callable

from stead.processes import Process
from stead.store.seam import Flow, execute, rows

# A process row this old whose worker no heartbeat names any more is dropped.
_STALE_AFTER = 24 * 3600.0


def record(worker_id: str, process: Process, now: float) -> Flow[None]:
    yield execute("record_process", {
        "worker_id": worker_id, "machine": process.machine, "pid": process.pid,
        "started": process.started, "now": now})
    yield execute("forget_gone_processes", {"before": now - _STALE_AFTER})


def mark_locks(worker_id: str) -> Flow[None]:
    yield execute("mark_locks", {"worker_id": worker_id})


def forget(worker_id: str) -> Flow[None]:
    yield execute("forget_process", {"worker_id": worker_id})


def dead_holders(worker_id: str, lease_now: float | None, dead: Callable[[Process], bool],
                 limit: int, machine: str) -> Flow[list[str]]:
    """The (at most `limit`) other workers holding leases whose process has
    ended. A holder on this `machine` is judged by its process alone (`dead`):
    its presence lock is freed by any dropped connection too, and a live
    process whose connection was cut must keep its leases. A holder elsewhere
    is judged by its presence lock."""
    holders = yield rows("lease_holders", {
        "worker_id": worker_id, "lease_now": lease_now, "limit": limit})
    found = []
    for h in holders:
        process = Process(str(h["machine"]), int(h["pid"]), str(h["started"]))
        if dead(process) if process.machine == machine else bool(h["lock_free"]):
            found.append(str(h["worker_id"]))
    return found


def end_leases(holders: list[str], lease_now: float | None) -> Flow[None]:
    """End every lease `holders` still hold, and forget their processes."""
    for holder in holders:
        yield execute("end_leases_of", {"worker_id": holder, "lease_now": lease_now})
        yield execute("forget_process", {"worker_id": holder})
