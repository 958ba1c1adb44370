"""Who holds a run: a queue's claim, renewals and releases, and the
heartbeats that say which workers serve which code (and which runs none serves)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stead.store import _rows, schema_versions
from stead.store.seam import Flow, execute, fence_params, one, rows
from stead.tenants import fair

if TYPE_CHECKING:  # for annotations; `Stranded` is imported below where one is made
    from stead.queues import Queue
    from stead.records import Fence, HostRow, RunRow, Stranded
    from stead.records.fleet import Gauges
    from stead.store.schema_versions import Beyond


def renew(
    fences: Sequence[Fence], lease_seconds: float, lease_now: float | None,
    in_flight: Mapping[Fence, str | None],
) -> Flow[list[Fence]]:
    """Extend the leases still held to `lease_seconds` past the database's
    time (or `lease_now`), and set the `in_flight` markers of those it names
    (None: nothing in flight); the fences that were lost."""
    held_rows = yield rows("renew", {
        "lease_seconds": lease_seconds, "lease_now": lease_now,
        "run_ids": [f.run_id for f in fences],
        "epochs": [f.epoch for f in fences], "workers": [f.worker_id for f in fences],
        # '' clears the column; null (a fence not named) leaves it as it is.
        "in_flight": [(in_flight[f] or "") if f in in_flight else None for f in fences],
    })
    held = {(r["run_id"], r["epoch"], r["lease_owner"]) for r in held_rows}
    return [f for f in fences if (f.run_id, f.epoch, f.worker_id) not in held]


def release(fence: Fence, now: float) -> Flow[None]:
    yield execute("release", {**fence_params(fence), "now": now})


def claim_queue(queue: Queue, params: dict[str, Any], limit: int) -> Flow[list[RunRow]]:
    """Lease up to `limit` runs of `queue` (params: worker_id, hosted,
    exclude, now, lease_now, lease_seconds), no more than its limits leave room for. The
    queue's lock is taken first, so the counts stay true until the commit."""
    yield execute("lock_queue", {"queue": queue.name})
    load = yield one("queue_load", {
        "queue": queue.name, "worker_id": params["worker_id"], "lease_now": params["lease_now"],
        "since": queue.since(params["now"]),
    })
    room = queue.room(int(load["active"]), int(load["mine"]), int(load["recent"]), limit)
    if room <= 0:
        return []
    taken = yield rows("claim_queue", {**params, "queue": queue.name, "limit": room})
    return sorted((_rows.run(r) for r in taken), key=lambda r: (r.priority, r.created_at))


# The most tenants one claim weighs against each other (a skip scan reads one
# index entry per tenant with work; past this many, the first by name).
MAX_TENANTS = 1000
# How many times a claim gives out again the slots a tenant could not fill.
_ROUNDS = 3


def ready_queues(probe: dict[str, Any]) -> Flow[list[str]]:
    found = yield rows("ready_queues", probe)
    return [str(r["queue"]) for r in found]


def ready_tenants() -> Flow[list[str]]:
    found = yield rows("ready_tenants", {"most": MAX_TENANTS})
    return [str(r["tenant"]) for r in found]


def claim_fair(policy: fair.Policy, params: dict[str, Any], limit: int, turn: int,
               tenants: Sequence[str], keep: int = 0,
               held: Mapping[str, int] | None = None) -> Flow[list[RunRow]]:
    """Lease up to `limit` runs outside any queue (params: worker_id, hosted,
    exclude, now, lease_now, lease_seconds), shared among the tenants with
    runs ready by `fair.shares`, each tenant's under its limits. The locks of
    the limited ones among `tenants` (those read ready before the claim) are
    taken first, in the order of their names, so their counts stay true until
    the commit across every worker; a limited tenant found ready only after
    them waits for the next claim. `keep`: see `fair.shares`. `held`: the
    claiming worker's runs in flight by tenant, each counted leased even once
    its end is committed, until that worker has seen it end (its slot is not
    free before). Each run taken names its tenant."""
    locked = sorted({t for t in tenants if policy.of(t).limited})
    if locked:
        yield execute("lock_tenants", {"tenants": locked})
    now = params["now"]
    read = yield rows("tenant_loads", {
        **params, "most": MAX_TENANTS, "since": policy.default.since(now),
        "named": list(policy.named),
        "sinces": json.dumps({t: x.since(now) for t, x in policy.named.items()})})
    loads, held = {}, held or {}
    for r in read:
        tenant = str(r["tenant"])
        ready = bool(r["ready"]) and (tenant in locked or not policy.of(tenant).limited)
        active = max(int(r["active"]), held.get(tenant, 0))
        loads[tenant] = fair.Load(tenant, active, limit if ready else 0, int(r["recent"]))
    claimed: list[RunRow] = []
    for _ in range(_ROUNDS):
        left = limit - len(claimed)
        # Each round keeps `keep` slots: a tenant given runs in a round before
        # counts as one with runs in flight.
        plan = fair.shares(left, list(loads.values()), policy, turn, keep)
        if not plan:
            break
        taken = yield from _claim_tenants(params, plan)
        for tenant, wanted in plan.items():
            got = taken[tenant]  # each run naming its tenant (the claim's queries read it)
            claimed += got
            was = loads[tenant]
            # Fewer than asked: the tenant has no more ready for this worker.
            loads[tenant] = fair.Load(tenant, was.active + len(got),
                                      was.ready if len(got) == wanted else 0,
                                      was.recent + len(got))
        if len(claimed) >= limit or all(x.ready == 0 for x in loads.values()):
            break
    return sorted(claimed, key=lambda r: r.created_at)


def _claim_tenants(params: dict[str, Any],
                   plan: dict[str, int]) -> Flow[dict[str, list[RunRow]]]:
    """Lease up to `plan[tenant]` runs of each tenant: in one statement where
    the dialect has one (PostgreSQL: a round trip per claim, not per tenant),
    else tenant by tenant (SQLite's `claim_tenants` is empty: no answer)."""
    taken: dict[str, list[RunRow]] = {tenant: [] for tenant in plan}
    if len(plan) > 1:
        found = yield rows("claim_tenants", {
            **params, "tenants": list(plan), "limits": list(plan.values())})
        if found is not None:
            for r in found:
                taken[str(r["tenant"])].append(_rows.run(r))
            return taken
    for tenant, wanted in plan.items():
        taken[tenant] = [_rows.run(r) for r in (yield rows("claim_tenant", {
            **params, "tenant": tenant, "limit": wanted}))]
    return taken


def fair_claimed(params: dict[str, Any]) -> Flow[list[RunRow]]:
    """The read-back of a fair claim: the runs outside a queue that very claim
    leased (none: it did not land, and claiming nothing is a fine answer),
    each naming its tenant as the claim's own answer does."""
    taken = yield rows("claimed_by", params)
    found = []
    for run in map(_rows.run, taken):
        if run.queue is None:
            row = yield one("run_tenant", {"run_id": run.run_id})
            found.append(dataclasses.replace(run, tenant=None if row is None else
                                             (row["tenant"] or None)))
    return found


def queue_claimed(queue: Queue, params: dict[str, Any]) -> Flow[list[RunRow]]:
    """The read-back of a queue's claim: the runs of the queue that very claim
    leased (none: it did not land, and claiming nothing is a fine answer)."""
    taken = yield rows("claimed_by", params)
    return [run for run in map(_rows.run, taken) if run.queue == queue.name]


def heartbeat(worker_id: str, served: Sequence[tuple[str, str]], now: float,
              forget_before: float, policy_version: str | None,
              live_until: float, release: tuple[str, int]) -> Flow[None]:
    """Say `worker_id` is alive until `live_until`, serves each `(code, role)`
    and runs `policy_version` on `release` (stead's version and the schema
    version its code needs); forget heartbeats older than `forget_before`."""
    stead_version, schema_version = release
    for code, role in served:
        yield execute("heartbeat", {"worker_id": worker_id, "code": code, "role": role,
                                    "now": now, "policy_version": policy_version,
                                    "live_until": live_until, "stead_version": stead_version,
                                    "schema_version": schema_version})
    yield execute("forget_hosts", {"before": forget_before})


def schema_beyond(known: int) -> Flow[list[Beyond]]:
    """The schema versions past `known` the database has applied, as the
    releases that applied them described them."""
    found = yield rows("schema_beyond", {"known": known})
    return [schema_versions.beyond(r) for r in found]


def host_stopped(worker_id: str, now: float) -> Flow[None]:
    yield execute("host_stopped", {"worker_id": worker_id, "now": now})


def stranded(now: float, since: float, limit: int, lease_now: float | None,
             workflow: str | None = None) -> Flow[list[Stranded]]:
    found = yield rows("stranded_runs", {"now": now, "since": since, "limit": limit,
                                         "lease_now": lease_now, "workflow": workflow})
    from stead.records import Stranded  # as in `_rows`: a plain listing builds none

    return [Stranded(_rows.run(r), r["hosted_at"]) for r in found]


def hosts(limit: int) -> Flow[list[HostRow]]:
    return [_rows.host(r) for r in (yield rows("worker_hosts", {"limit": limit}))]


def gauges(now: float, soon: float, lease_now: float | None) -> Flow[Gauges]:
    """What a metrics scrape reports of the store (see `Gauges`), in one read."""
    from stead.records.fleet import Gauges, LiveRuns, QueueDepth

    live = yield rows("gauge_live_runs", {})
    queues = yield rows("gauge_queues", {"now": now, "lease_now": lease_now})
    waits = yield one("gauge_waits", {"soon": soon})
    today = dt.datetime.fromtimestamp(now, dt.UTC).date()
    made = yield one("gauge_days", {"today": today})  # None: no partitions (SQLite)
    days_ahead = None
    if made is not None:  # the days made one after another from today, less today
        days_ahead = -1
        for day in made["days"]:
            if (day - today).days != days_ahead + 1:
                break
            days_ahead += 1
    return Gauges(
        tuple(LiveRuns(r["workflow"], int(r["version"]), r["status"], int(r["runs"]),
                       r["oldest"]) for r in live),
        tuple(QueueDepth(r["queue"], int(r["runnable"]), r["ready_since"]) for r in queues),
        int(waits["open_waits"]) if waits else 0, int(waits["expiring"]) if waits else 0,
        days_ahead)


def put_meta(key: str, value: str) -> Flow[None]:
    yield execute("put_meta", {"key": key, "value": value})


def delete_meta(key: str) -> Flow[None]:
    yield execute("delete_meta", {"key": key})
