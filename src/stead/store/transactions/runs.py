"""Starting runs: one, a batch, a schedule's due ticks, a child of a run, a
fork or a successor; and the lineage that links a run to the one it came from."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from stead import errors
from stead.records import TERMINAL, IntentRow, LineageKind, Link, task_taken
from stead.store import _rows
from stead.store.seam import (
    NOT_LANDED,
    FencedWrite,
    Flow,
    Journal,
    NotLanded,
    count,
    execute,
    fence_params,
    one,
    rows,
    stale,
    together,
)
from stead.store.transactions import common, conversations, journal, quotas

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import NewFork, NewRun, Record, RunRow, ScheduleRow

    # Given the stored schedule (None: never seen) and the time, returns the
    # ticks to fire now and the next tick not yet fired (pure: no I/O).
    Due = Callable[[ScheduleRow | None, float], tuple[list[float], float]]


def live_owner(new: NewRun) -> Flow[RunRow | None]:
    """The live run that owns `new`'s task id, or else its queue's dedup key."""
    row = None
    if new.task_id is not None:
        row = yield one("find_live_task", {"task_id": new.task_id})
    if row is None and new.dedup_key is not None:
        row = yield one("find_live_dedup", {"queue": new.queue, "dedup_key": new.dedup_key})
    return None if row is None else _rows.run(row)


def create_run(new: NewRun, now: float) -> Flow[tuple[RunRow, bool] | None]:
    """The new run and True, or the live run owning its task and False; None
    if the insert lost to a conflicting run that is not live."""
    params = {"run_id": new.run_id, "workflow": new.workflow, "version": new.version,
              "task_id": new.task_id, "input": new.input, "now": now, "queue": new.queue,
              "priority": new.priority, "dedup_key": new.dedup_key}
    checked = False
    for _ in range(3):
        row = yield from live_owner(new)
        if row is not None:
            return row, False
        if not checked:
            yield from quotas.starts((yield from _tenant_of(new)), new.parent_id, 1, now)
            checked = True
        added = yield one("insert_run", params)
        if added is not None:
            yield from _tenant(new.run_id, new.tenant, new.parent_id)
            added = {**added, "tenant": new.tenant}
            if new.parent_id is not None or new.deadline is not None:
                links = {"run_id": new.run_id, "parent_id": new.parent_id,
                         "deadline": new.deadline}
                yield execute("set_run_links", links)
                added = {**added, "parent_id": new.parent_id, "deadline": new.deadline}
            if new.intent is None:
                return _rows.run(added), True
            first = IntentRow(new.run_id, 1, new.intent, new.intent_by, new.intent_why, now)
            yield execute("insert_intent", _rows.intent_params(first))
            yield execute("set_intent_version", {"run_id": new.run_id, "version": 1})
            return _rows.run(added).evolve(intent_version=1), True
        if new.task_id is None and new.dedup_key is None:
            break
        # A concurrent start of this task (or dedup key) won the insert: read its run.
    return None


def _tenant_of(new: NewRun) -> Flow[str | None]:
    """The tenant `new` will serve: its own, else its parent's."""
    if new.tenant is not None or new.parent_id is None:
        return new.tenant
    return (yield from quotas.run_tenant(new.parent_id))


def _tenant(run_id: str, tenant: str | None, parent_id: str | None) -> Flow[None]:
    """Name the tenant of the run just inserted (its row in run_tenants, made
    by the insert's trigger, says none): `tenant`, else its parent's."""
    if tenant is not None:
        yield execute("set_run_tenant", {"run_id": run_id, "tenant": tenant})
    elif parent_id is not None:
        yield execute("inherit_tenant", {"run_id": run_id, "from_id": parent_id})


def created(new: NewRun) -> Flow[tuple[RunRow, bool] | NotLanded | None]:
    row = yield one("get_run", {"run_id": new.run_id})
    return NOT_LANDED if row is None else (_rows.run(row), True)


# Runs of one batch are a microsecond apart in created_at, so a queue (or the
# plain claim) takes them in the order they were given.
BATCH_TICK = 1e-6


def create_runs(news: Sequence[NewRun], now: float) -> Flow[list[tuple[RunRow, bool]]]:
    """Create a batch of runs in one transaction (one insert for those without
    an intent): for each, in order, the new run and True, or the live run that
    owns its task id or dedup key (one earlier in the batch too) and False."""
    plain = [
        {"run_id": n.run_id, "workflow": n.workflow, "version": n.version,
         "task_id": n.task_id, "input": n.input, "created_at": now + i * BATCH_TICK,
         "queue": n.queue, "priority": n.priority, "dedup_key": n.dedup_key}
        # A run with an intent, a parent or a deadline goes the one-run way below.
        for i, n in enumerate(news)
        if n.intent is None and n.parent_id is None and n.deadline is None
    ]
    inserted: dict[str, RunRow] = {}
    plain_ids = {p["run_id"] for p in plain}
    per_tenant = Counter(n.tenant for n in news if n.run_id in plain_ids and n.tenant is not None)
    for tenant, many in sorted(per_tenant.items()):
        yield from quotas.starts(tenant, None, many, now)
    if plain:
        for row in (yield rows("insert_runs", {"runs": json.dumps(plain)})):
            run = _rows.run(row)
            inserted[run.run_id] = run
        named = [{"run_id": n.run_id, "tenant": n.tenant} for n in news
                 if n.tenant is not None and n.run_id in inserted]
        if named:
            yield execute("set_run_tenants", {"runs": json.dumps(named)})
            inserted.update((n["run_id"], inserted[n["run_id"]].evolve(tenant=n["tenant"]))
                            for n in named)
    made: list[tuple[RunRow, bool]] = []
    for new in news:
        if new.run_id in inserted:
            made.append((inserted[new.run_id], True))
            continue
        one_run = yield from create_run(new, now)  # an intent, or a conflict to read
        if one_run is None:
            raise errors.StoreError(
                f"could not create run {new.run_id} (task {new.task_id!r}): it conflicts "
                "with another run that is not live; try again")
        owner, created_now = one_run
        if not created_now and owner.task_id == new.task_id and owner.workflow != new.workflow:
            raise errors.InvalidStart(task_taken(new, owner))  # the batch rolls back
        made.append(one_run)
    if inserted:
        yield execute("notify_work")
    return made


def runs_created(news: Sequence[NewRun]) -> Flow[list[tuple[RunRow, bool]] | NotLanded]:
    """The read-back of a batch: each run stored, or the live run owning its
    task or dedup key; NOT_LANDED if one has neither."""
    made: list[tuple[RunRow, bool]] = []
    for new in news:
        row = yield one("get_run", {"run_id": new.run_id})
        owner = _rows.run(row) if row is not None else (yield from live_owner(new))
        if owner is None:
            return NOT_LANDED
        made.append((owner, row is not None))
    return made


def fork_run(fork: NewFork, now: float, where: str) -> Flow[RunRow]:
    """Create the fork with its journal prefix, open waits, task state and
    its link to the parent, in one transaction."""
    yield execute("lock_run", {"run_id": fork.parent_id})
    if (yield one("get_run", {"run_id": fork.parent_id})) is None:
        raise common.unknown_run(fork.parent_id, where)
    made = yield from create_run(fork.new, now)
    if made is None or not made[1]:
        raise errors.StoreError(f"could not create the fork {fork.new.run_id}; try again")
    run_id = fork.new.run_id
    if fork.new.tenant is None:  # a fork serves its parent's tenant
        yield execute("inherit_tenant", {"run_id": run_id, "from_id": fork.parent_id})
    if fork.records:
        # Its first claim must load the journal (a claim at epoch 1 skips it).
        yield execute("set_epoch", {"run_id": run_id, "epoch": 1})
    for r in fork.records:
        yield execute("insert_record", _rows.record_params(run_id, r))
    yield from conversations.copy(fork.parent_id, run_id, conversations.heads(fork.records))
    for w in fork.waits:
        yield from common.insert_wait(w)
    if fork.state is not None:
        params = {"task_key": fork.state.task_key, "version": fork.state.version,
                  "data": fork.state.data, "run_id": run_id, "now": now}
        yield execute("upsert_state", params)
        yield execute("insert_state_history", params)
    yield execute("insert_lineage", _rows.link_params(
        Link(run_id, fork.parent_id, LineageKind.FORK, fork.at_seq, now)))
    return made[0].evolve(epoch=1 if fork.records else 0)


def linked(run_id: str) -> Flow[RunRow | NotLanded]:
    """The read-back of a fork or a continuation: the new run, if its link is stored."""
    if (yield one("get_lineage", {"run_id": run_id})) is None:
        return NOT_LANDED
    row = yield one("get_run", {"run_id": run_id})
    return NOT_LANDED if row is None else _rows.run(row)


def continue_run(write: FencedWrite, new: NewRun, at_seq: int, now: float) -> Flow[RunRow]:
    """End the run (`write` finishes it, fenced) and create its successor
    `new`, which takes its task over, in one transaction: a crash keeps both
    or neither."""
    yield Journal(write)
    made = yield from create_run(new, now)
    if made is None or not made[1]:
        raise errors.StoreError(
            f"run {write.fence.run_id}: its successor could not be created (task "
            f"{new.task_id!r} has another live run); nothing was written")
    if new.tenant is None:  # a successor serves its predecessor's tenant
        yield execute("inherit_tenant", {"run_id": new.run_id, "from_id": write.fence.run_id})
    yield execute("insert_lineage", _rows.link_params(
        Link(new.run_id, write.fence.run_id, LineageKind.CONTINUED, at_seq, now)))
    return made[0]


def lineage(run_id: str) -> Flow[tuple[Link | None, list[Link]]]:
    """The run's link to its parent (None: it has none) and its own forks
    and successor, oldest first."""
    parent = yield one("get_lineage", {"run_id": run_id})
    children = yield rows("list_descendants", {"run_id": run_id})
    return (None if parent is None else _rows.link(parent)), [_rows.link(r) for r in children]


def judge_children(children: Sequence[str], rows: Sequence[Any]) -> None:
    """Raise `ChildEnded` if a child's `child_status` row (in the order of
    `children`) says it is no longer live."""
    for child_id, row in zip(children, rows, strict=True):
        if row is None or row["status"] in TERMINAL:
            raise errors.ChildEnded(f"child run {child_id}",
                                    "missing" if row is None else str(row["status"]))


def start_child(write: FencedWrite, new: NewRun, now: float) -> Flow[tuple[RunRow, Record]]:
    """Start the child run `new` of the fence's run and journal its id there
    (the last of `write.records`), in one transaction: a takeover finds both
    or neither. The child's id is derived from the parent and the call, so a
    start found done already is read back, not made twice. A live run of the
    child's task that this parent did not start is journaled as an error."""
    from stead.records import RecordStatus  # here: a store that lists runs loads no journal

    fence, records = write.fence, write.records
    yield execute("lock_run", {"run_id": fence.run_id})
    # Read together (one round trip on PostgreSQL, with the lock before them).
    held, found = yield together(one("fence", fence_params(fence)),
                                 one("get_run", {"run_id": new.run_id}))
    if held is None:
        raise stale(fence)
    if found is not None:
        child = _rows.run(found)
    else:
        made = yield from create_run(new, now)
        if made is None:
            raise errors.StoreError(
                f"could not start child run {new.run_id} (task {new.task_id!r}): it "
                "conflicts with another run that is not live; try again")
        child = made[0]
    last = records[-1]
    if child.parent_id != fence.run_id:
        last = last.evolve(status=RecordStatus.ERROR, payload=json.dumps({
            "run_id": child.run_id, "status": "conflict", "type": "TaskTaken",
            "message": f"task {new.task_id!r} already has a live run {child.run_id} that "
                       "this run did not start"}))
    else:
        last = last.evolve(payload=json.dumps({"run_id": child.run_id}))
    yield Journal(dataclasses.replace(write, records=[*records[:-1], last]), checked=True)
    return child, last


def child_started(
    write: FencedWrite, attempted: tuple[RunRow, Record] | None,
) -> Flow[tuple[RunRow, Record] | NotLanded]:
    if attempted is None:
        return NOT_LANDED
    written = [*write.records[:-1], attempted[1]]
    if not (yield from journal.records_landed(write.fence.run_id, written)):
        return NOT_LANDED
    row = yield one("get_run", {"run_id": attempted[0].run_id})
    return NOT_LANDED if row is None else (_rows.run(row), attempted[1])


def fire_schedule(
    name: str, cron: str, due: Due, make: Callable[[float], NewRun], now: float,
) -> Flow[tuple[list[tuple[float, RunRow]], float]]:
    """Start the runs of the schedule's ticks that are due, and move its next
    tick on, in one transaction; the tick's run (`make(tick)`) names the tick
    in its task id. The move is a compare-and-set on the next tick read, so
    of workers firing at once, one starts the tick's runs and the others
    change nothing. Returns the (tick, run)s started and the next tick."""
    row = yield one("get_schedule", {"name": name})
    current = None if row is None else _rows.schedule(row)
    ticks, next_tick = due(current, now)
    if current is None:
        yield execute("insert_schedule", {"name": name, "cron": cron,
                                          "next_tick": next_tick, "now": now})
        return [], next_tick
    if next_tick == current.next_tick and cron == current.cron:
        return [], next_tick
    moved = yield count("advance_schedule", {"name": name, "cron": cron,
                                             "next_tick": next_tick, "now": now,
                                             "expect": current.next_tick})
    if not moved:  # another worker fired these ticks
        again = yield one("get_schedule", {"name": name})
        return [], next_tick if again is None else float(again["next_tick"])
    started = []
    for tick in ticks:
        made = yield from create_run(make(tick), now)
        if made is not None:
            started.append((tick, made[0]))
    if started:
        yield execute("notify_work")
    return started, next_tick
