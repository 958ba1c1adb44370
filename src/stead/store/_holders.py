"""Flows and judgements for dead lease holders.

A worker is dead when it stops renewing its leases: they run out, judged on
the database's clock. Two signals that a network blip cannot fake end them
sooner, so a SIGKILLed worker's runs move within about a second:

- on the claimer's own machine, the holder's process is gone (its pid gone,
  a zombie, or reused: see stead/processes.py). Final: a process does not
  come back, so its process row goes with its leases;
- on another machine (PostgreSQL), the holder's presence lock has stayed
  free, and not been taken again, for a grace period longer than a reconnect. A dropped
  connection frees the lock too, but a live worker takes it back at once and
  counts one more take (`present`), which restarts the claimer's watch
  (`Absences`). Not final: a worker cut off from the database for longer
  than the grace is taken for dead, keeps its process row, and counts as
  alive again once it takes its lock back; its runs' leases end early but
  remember when they would have run out (table `lease_ends`), for the
  new holder of a run to wait that long before acting on "not found" for
  an effect that worker may still be sending.

Each judgement is made again inside the statement that ends the leases (the
same process row; the lock still free with the same count of takes), so a
holder that came back between the look and the write keeps its runs.
Holders no signal can judge keep their leases until they run out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from stead.processes import Process
from stead.store.seam import Flow, count, execute, rows

if TYPE_CHECKING:  # annotations only: a claimer builds no verdicts
    from stead.records import WorkerLiveness

# A process row this old whose worker no heartbeat names any more is dropped.
_STALE_AFTER = 24 * 3600.0


@dataclasses.dataclass(frozen=True, slots=True)
class Holder:
    """Another worker that holds leases, as its process row and presence lock stand."""

    worker_id: str
    process: Process
    lock_free: bool  # it took its presence lock, and no session holds it now
    taken: int  # how many times it has taken its presence lock


class Absences:
    """When this claimer first found each holder's presence lock free, under
    which count of takes: the holder is absent once the lock has stayed free,
    under the same count, for the whole grace period."""

    def __init__(self) -> None:
        self._since: dict[str, tuple[int, float]] = {}

    def absent(self, holders: list[Holder], now: float, grace: float) -> list[Holder]:
        """The holders absent at `now` (a monotonic time) of those found now."""
        found, seen = [], set()
        for h in holders:
            if not h.lock_free:
                continue
            seen.add(h.worker_id)
            taken, since = self._since.setdefault(h.worker_id, (h.taken, now))
            if taken != h.taken:  # taken again, and lost again, since the last look
                self._since[h.worker_id] = (h.taken, now)
            elif now - since >= grace:
                found.append(h)
        for worker_id in self._since.keys() - seen:
            del self._since[worker_id]
        return found

    def next_due(self, grace: float) -> float | None:
        """When the soonest watched holder's grace ends (monotonic), if any."""
        return min((since + grace for _taken, since in self._since.values()), default=None)


def record(worker_id: str, process: Process, now: float) -> Flow[None]:
    yield execute("record_process", {
        "worker_id": worker_id, "machine": process.machine, "pid": process.pid,
        "started": process.started, "now": now})
    yield execute("forget_gone_processes", {"before": now - _STALE_AFTER})


def present(worker_id: str, process: Process, now: float) -> Flow[None]:
    """`worker_id` took its presence lock (again): one take more, so a
    claimer watching the lock free starts its grace again. Its process row is
    written again too, in case it was taken for dead and forgotten."""
    yield execute("present", {
        "worker_id": worker_id, "machine": process.machine, "pid": process.pid,
        "started": process.started, "now": now})


def forget(worker_id: str) -> Flow[None]:
    yield execute("forget_process", {"worker_id": worker_id})


def lease_holders(worker_id: str, lease_now: float | None, limit: int) -> Flow[list[Holder]]:
    """The (at most `limit`) other workers holding leases not ended yet."""
    found = yield rows("lease_holders", {
        "worker_id": worker_id, "lease_now": lease_now, "limit": limit})
    return [Holder(str(h["worker_id"]), Process(str(h["machine"]), int(h["pid"]),
                                                str(h["started"])),
                   bool(h["lock_free"]), int(h["presence_taken"])) for h in found]


def gone(holders: list[Holder], dead: Callable[[Process], bool], machine: str) -> list[Holder]:
    """The holders on this `machine` whose process has ended. A holder
    elsewhere is never judged here: only its presence lock (`Absences`)
    or its lease can tell."""
    return [h for h in holders if h.process.machine == machine and dead(h.process)]


def end_leases(gone: list[Holder], absent: list[Holder],
               lease_now: float | None) -> Flow[list[str]]:
    """End the leases of the holders whose process is `gone` (forgetting
    their process rows) and of those `absent` (keeping them), each judged
    again as its leases end; the ids of those whose leases ended."""
    ended = []
    for h in gone:
        n = yield count("end_leases_of_gone", {
            "worker_id": h.worker_id, "machine": h.process.machine, "pid": h.process.pid,
            "started": h.process.started, "lease_now": lease_now})
        if n:
            ended.append(h.worker_id)
            yield execute("forget_process", {"worker_id": h.worker_id})
    for h in absent:
        n = yield count("end_leases_of_absent", {
            "worker_id": h.worker_id, "taken": h.taken, "lease_now": lease_now})
        if n:
            ended.append(h.worker_id)
    return ended


# -- every worker, for `stead doctor` (`Store.worker_liveness`) -----------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class Recorded:
    """Every worker that recorded its process, as a lease holder's row reads
    (`holders`), the ids of those that took their presence lock since, and
    the ids of the workers heard from that did not stop cleanly and whose
    process is no longer recorded (`forgotten`)."""

    holders: list[Holder]
    locking: frozenset[str]
    forgotten: list[str]


def workers() -> Flow[Recorded]:
    holders, locking, forgotten = [], set(), []
    for h in (yield rows("worker_liveness", {})):
        if h["machine"] is None:
            forgotten.append(str(h["worker_id"]))
            continue
        holders.append(Holder(str(h["worker_id"]), Process(str(h["machine"]), int(h["pid"]),
                                                           str(h["started"])),
                              bool(h["lock_free"]), int(h["presence_taken"])))
        if h["locks"]:
            locking.add(str(h["worker_id"]))
    return Recorded(holders, frozenset(locking), forgotten)


def verdicts(found: Recorded, running: Callable[[Process], bool | None], machine: str,
             absent: Collection[str], grace: float) -> list[WorkerLiveness]:
    """Each worker's verdict by the claimers' test: on this `machine` its
    process (`running`: True, False, or None when it cannot tell); elsewhere
    its presence lock, dead once `absent` (free for `grace` seconds, not taken
    again: `Absences`). A worker whose process row is gone though it did not
    stop cleanly was found gone that way (`end_leases` forgets it)."""
    from stead.records import Liveness, WorkerLiveness

    judged = [WorkerLiveness(w, Liveness.DEAD, (
        "it did not stop cleanly and its process is no longer recorded: a claimer found it "
        "gone and ended its leases (or it could not record its process)"))
        for w in found.forgotten]
    for h in found.holders:
        if h.process.machine == machine:
            runs = running(h.process)
            verdict = {True: Liveness.ALIVE, False: Liveness.DEAD, None: Liveness.UNKNOWN}[runs]
            reason = (f"its process {h.process.pid} on this machine "
                      + {True: "runs", False: "has ended", None: "cannot be looked at"}[runs])
        elif h.worker_id in absent:
            verdict, reason = Liveness.DEAD, (f"on another machine; its presence lock stayed "
                                              f"free for {grace:g}s: its session ended")
        elif h.lock_free:
            verdict, reason = Liveness.UNKNOWN, ("on another machine; its presence lock is "
                                                 "free, taken back since: its connection drops")
        elif h.worker_id in found.locking:
            verdict, reason = Liveness.ALIVE, "on another machine; it holds its presence lock"
        else:
            verdict, reason = Liveness.UNKNOWN, ("on another machine, with no presence lock "
                                                 "(SQLite has none): its lease decides")
        judged.append(WorkerLiveness(h.worker_id, verdict, reason))
    return sorted(judged, key=lambda j: j.worker_id)
