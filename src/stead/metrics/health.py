"""Is the fleet healthy? `look()` reads, in one pass over the database,
what `stead status` prints and the dashboard's status page shows: the live
workers (by the test claimers use), the queues with their depth and oldest
age, the human waits, the unknown effects, the stranded runs and the recent
takeovers, and says what needs a person.

It reads what `/metrics` reports (`fleet.read`) and asks each worker's
liveness as `stead doctor` does. A process's store errors are its own
counters (`stead_store_errors_total` on its `/metrics`), not stored.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from stead import records
from stead.metrics import fleet

if TYPE_CHECKING:
    from stead.store.base import Store

RECENT = 3600.0  # takeovers counted over the last hour


@dataclasses.dataclass(frozen=True)
class Status:
    """The fleet as one look found it; `needs` says what needs a person."""

    schema: int | None
    workers: list[dict[str, str]]  # worker_id, verdict, reason, serves
    queues: list[dict[str, Any]]  # queue, runnable, oldest_age
    waits_open: int
    waits_expiring: int
    stopped: dict[str, int]  # status -> runs stopped for a person
    unknown_effects: int
    unknown_oldest_age: float
    stranded: dict[str, int]  # workflow@version -> runs
    unserved: list[str]  # workflow@version with runnable runs and no live worker
    takeovers: int  # in the last RECENT seconds
    needs: list[str]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"healthy": not self.needs}


async def look(store: Store, *, grace: float, max_age: float) -> Status:
    """The fleet now; a runnable run waiting longer than `max_age` seconds
    to be claimed, and one no worker served for `grace`, need a person."""
    reading = await fleet.read(store, grace=grace)
    judged = {w.worker_id: w for w in await store.worker_liveness()}
    takeovers = await store.resumes_since(reading.now - RECENT)
    hosts = await store.worker_hosts()
    versions = store.database.versions
    now = reading.now
    serves: dict[str, set[str]] = {}
    for h in hosts:
        until = h.live_until if h.live_until is not None else h.seen_at + grace
        if h.stopped_at is None and until >= now:
            serves.setdefault(h.worker_id, set()).add(h.code)
    unrecorded = records.WorkerLiveness("", records.Liveness.UNKNOWN, "no process recorded")
    workers = []
    for worker_id in sorted(serves):
        verdict = judged.get(worker_id, unrecorded)
        workers.append({"worker_id": worker_id, "verdict": str(verdict.verdict),
                        "reason": verdict.reason, "serves": ", ".join(sorted(serves[worker_id]))})
    live = {w["worker_id"] for w in workers if w["verdict"] != records.Liveness.DEAD}
    served = {code for w, codes in serves.items() if w in live for code in codes}
    queues: list[dict[str, Any]] = [{"queue": q.queue or fleet.NO_QUEUE, "runnable": q.runnable,
               "oldest_age": round(max(now - q.ready_since, 0.0), 1)
               if q.ready_since is not None else 0.0} for q in reading.gauges.queues]
    stopped: dict[str, int] = {}
    unknown_age = 0.0
    for x in reading.gauges.live:
        if x.status in records.STOPPED:
            stopped[x.status] = stopped.get(x.status, 0) + x.runs
        if x.status == records.RunStatus.OUTCOME_UNKNOWN and x.oldest is not None:
            unknown_age = max(unknown_age, now - x.oldest)
    unknown = stopped.get(records.RunStatus.OUTCOME_UNKNOWN, 0)
    stranded = {f"{w}@{v}": n for (w, v), n in sorted(reading.stranded.items())}
    unserved = sorted(f"{w}@{v}" for (w, v) in reading.runnable if f"{w}@{v}" not in served)
    needs = []
    if unknown:
        needs.append(f"{unknown} effect(s) with an unknown outcome: stead runs ls --status "
                     "outcome_unknown, then stead reconcile RUN EFFECT")
    for status in (records.RunStatus.PAUSED, records.RunStatus.INCOMPATIBLE):
        if stopped.get(status):
            needs.append(f"{stopped[status]} run(s) stopped as {status}: stead runs ls "
                         f"--status {status}")
    if stranded:
        needs.append(f"{sum(stranded.values())} stranded run(s) ({', '.join(stranded)}): "
                     "stead doctor")
    if unserved:
        needs.append(f"runnable runs and no live worker for {', '.join(unserved)}: start one")
    needs += [f"queue {q['queue']}: a run has waited {q['oldest_age']:.0f} s to be claimed "
              f"(more than {max_age:g} s)" for q in queues if q["oldest_age"] > max_age]
    needs += [f"worker {w['worker_id']} is dead ({w['reason']}): its runs are taken over at "
              "the next claim" for w in workers if w["verdict"] == records.Liveness.DEAD]
    return Status(None if versions is None else versions.version, workers, queues,
                  reading.gauges.waits_open, reading.gauges.waits_expiring, stopped, unknown,
                  round(unknown_age, 1), stranded, unserved, takeovers, needs)
