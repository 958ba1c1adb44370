"""Every transaction of the store, written once, as a flow (see `seam`):
what it reads, where it asks a pure judgement (the fence, `Judge`,
`StateChange`), what it writes. Each function returns a fresh flow; a backend
runs it in one transaction.

The read-backs (`created`, `journaled`, `delivered`...) settle a write whose
commit nobody acknowledged (a connection lost during COMMIT): they say
whether it is stored, so it is never written twice. Only a server database
needs them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from stead import errors
from stead.queues import Queue
from stead.records import (
    TERMINAL,
    UNAUTHENTICATED,
    ActionRow,
    DeliveryContext,
    EventRow,
    Fence,
    HostRow,
    IntentRow,
    Judgement,
    LineageKind,
    Link,
    MigrationPlan,
    MigrationRow,
    NewFork,
    NewRun,
    Record,
    RecordStatus,
    RejectReason,
    ResumeRecord,
    RunExport,
    RunRow,
    RunStatus,
    ScheduleRow,
    SnapshotRow,
    StateRow,
    Stranded,
    Verdict,
    WaitRow,
    WaitState,
    task_taken,
)
from stead.store import _rejections, _rows
from stead.store._rows import Row
from stead.store.seam import (
    NOT_LANDED,
    FencedWrite,
    Flow,
    Journal,
    NotLanded,
    OffLoop,
    count,
    execute,
    fence_params,
    one,
    rows,
    stale,
)

R = TypeVar("R")
# Judges a delivery inside its transaction (pure: no I/O).
Judge = Callable[[DeliveryContext], Judgement]
# Given the current task state (or None), returns the new data (JSON text, or
# None for a refused change) and the status and payload of the journal record
# that says what happened (the last of the records written with it).
StateChange = Callable[[StateRow | None], tuple[str | None, str, str]]
# Given the current task state (or None), returns the JSON text of the new
# data; raising refuses the change (nothing is written).
OutsideChange = Callable[[StateRow | None], str]
# Given the intent version in force (or None) and the run, returns the JSON
# text of the next version; raising refuses the change (nothing is written).
Revise = Callable[[IntentRow | None, RunRow], str]
# Given the intent version in force (or None) and the time, raises
# `GrantRefused` if the records about to be journaled are not allowed.
Guard = Callable[[IntentRow | None, float], None]


def unknown_run(run_id: str, where: str) -> errors.UnknownRun:
    return errors.UnknownRun(f"no run {run_id!r} in {where}")


# -- runs ---------------------------------------------------------------------
def create_run(new: NewRun, now: float) -> Flow[tuple[RunRow, bool] | None]:
    """The new run and True, or the live run owning its task and False; None
    if the insert lost to a conflicting run that is not live."""
    params = {"run_id": new.run_id, "workflow": new.workflow, "version": new.version,
              "task_id": new.task_id, "input": new.input, "now": now, "queue": new.queue,
              "priority": new.priority, "dedup_key": new.dedup_key}
    for _ in range(3):
        row = yield from live_owner(new)
        if row is not None:
            return row, False
        added = yield one("insert_run", params)
        if added is not None:
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


def fork_run(fork: NewFork, now: float, where: str) -> Flow[RunRow]:
    """Create the fork with its journal prefix, open waits, task state and
    its link to the parent, in one transaction."""
    yield execute("lock_run", {"run_id": fork.parent_id})
    if (yield one("get_run", {"run_id": fork.parent_id})) is None:
        raise unknown_run(fork.parent_id, where)
    made = yield from create_run(fork.new, now)
    if made is None or not made[1]:
        raise errors.StoreError(f"could not create the fork {fork.new.run_id}; try again")
    run_id = fork.new.run_id
    if fork.records:
        # Its first claim must load the journal (a claim at epoch 1 skips it).
        yield execute("set_epoch", {"run_id": run_id, "epoch": 1})
    for r in fork.records:
        yield execute("insert_record", _rows.record_params(run_id, r))
    for w in fork.waits:
        yield execute("insert_wait", _rows.wait_params(w))
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
    yield execute("insert_lineage", _rows.link_params(
        Link(new.run_id, write.fence.run_id, LineageKind.CONTINUED, at_seq, now)))
    return made[0]


def lineage(run_id: str) -> Flow[tuple[Link | None, list[Link]]]:
    """The run's link to its parent (None: it has none) and its own forks
    and successor, oldest first."""
    parent = yield one("get_lineage", {"run_id": run_id})
    children = yield rows("list_descendants", {"run_id": run_id})
    return (None if parent is None else _rows.link(parent)), [_rows.link(r) for r in children]


def state_version(task_key: str, version: int) -> Flow[StateRow | None]:
    """The task's state as it was at `version` (its history keeps each)."""
    row = yield one("state_version", {"task_key": task_key, "version": version})
    return None if row is None else _rows.state_history(row)


def live_owner(new: NewRun) -> Flow[RunRow | None]:
    """The live run that owns `new`'s task id, or else its queue's dedup key."""
    row = None
    if new.task_id is not None:
        row = yield one("find_live_task", {"task_id": new.task_id})
    if row is None and new.dedup_key is not None:
        row = yield one("find_live_dedup", {"queue": new.queue, "dedup_key": new.dedup_key})
    return None if row is None else _rows.run(row)


def created(new: NewRun) -> Flow[tuple[RunRow, bool] | NotLanded | None]:
    row = yield one("get_run", {"run_id": new.run_id})
    return NOT_LANDED if row is None else (_rows.run(row), True)


def read_one(name: str, params: dict[str, Any], convert: Callable[[Row], R]) -> Flow[R | None]:
    """The row query `name` finds, as a record; None if none."""
    row = yield one(name, params)
    return None if row is None else convert(row)


def read_all(name: str, params: dict[str, Any], convert: Callable[[Row], R]) -> Flow[list[R]]:
    return [convert(row) for row in (yield rows(name, params))]


def cancel_run(run_id: str, now: float, where: str) -> Flow[RunRow]:
    row = yield one("cancel_run", {"run_id": run_id, "now": now})
    if row is None:  # not live: as it is
        row = yield one("get_run", {"run_id": run_id})
        if row is None:
            raise unknown_run(run_id, where)
    return _rows.run(row)


def resume_stopped(
    run_id: str, expect_status: str, record: Record | None, now: float, where: str,
) -> Flow[RunRow]:
    row = yield one("resume_stopped", {"run_id": run_id, "expect": expect_status, "now": now})
    if row is None:
        raise (yield from not_stopped(run_id, expect_status, where))
    run = _rows.run(row)
    if record is not None:
        seq_row = yield one("next_seq", {"run_id": run_id})
        decided = record.evolve(seq=int(seq_row["seq"]), epoch=run.epoch, at=now)
        yield execute("insert_record", _rows.record_params(run_id, decided))
    yield execute("notify_work")
    return run


def resumed(run_id: str, expect_status: str, record: Record | None) -> Flow[RunRow | NotLanded]:
    row = yield one("get_run", {"run_id": run_id})
    if record is None:  # landed if the run left the stopped status
        if row is None or row["status"] == expect_status:
            return NOT_LANDED
        return _rows.run(row)
    found = yield one("find_record", {
        "run_id": run_id, "addr": record.addr, "attempt": record.attempt,
        "status": record.status,
    })
    return NOT_LANDED if found is None or row is None else _rows.run(row)


# -- leases -------------------------------------------------------------------
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


# -- journal ------------------------------------------------------------------
def records_landed(
    run_id: str, records: Sequence[Record], resume: ResumeRecord | None = None,
) -> Flow[bool | None]:
    """Whether a write of `records` (or, with none, of `resume`) is stored;
    None if neither tells."""
    if records:
        row = yield one("count_records", {
            "run_id": run_id, "seqs": [r.seq for r in records],
            "addrs": [r.addr for r in records], "attempts": [r.attempt for r in records],
            "statuses": [r.status for r in records],
        })
        n = int(row["n"]) if row else 0
        if 0 < n < len(records):
            raise errors.StoreError(
                f"run {run_id}: {n} of the {len(records)} records of one write are stored; "
                "the journal was changed outside stead"
            )
        return n == len(records)
    if resume is not None:
        found = yield one("has_resume", {"run_id": run_id, "epoch": resume.epoch})
        return found is not None
    return None


def journaled(write: FencedWrite) -> Flow[NotLanded | None]:
    """The read-back of an append or a finish."""

    fence, end = write.fence, write.finish
    if end is None or write.records:
        done = yield from records_landed(fence.run_id, write.records, write.resume)
        return None if done else NOT_LANDED
    row = yield one("get_run", {"run_id": fence.run_id})
    ended = row is not None and (row["status"], row["epoch"], row["lease_owner"]) == (
        end.status, fence.epoch, None
    )
    return None if ended else NOT_LANDED


# -- waits ----------------------------------------------------------------------
def wait_state(wait_id: str) -> Flow[str]:
    row = yield one("get_wait", {"wait_id": wait_id})
    return "missing" if row is None else str(row["state"])


def open_wait(write: FencedWrite, wait: WaitRow) -> Flow[None]:
    yield Journal(write)
    yield execute("insert_wait", _rows.wait_params(wait))


def wait_opened(wait_id: str) -> Flow[NotLanded | None]:
    found = yield one("get_wait", {"wait_id": wait_id})
    return None if found is not None else NOT_LANDED


def close_wait(write: FencedWrite, wait_id: str, state: str, now: float) -> Flow[None]:
    yield Journal(write)
    closed = yield count("close_wait", {"wait_id": wait_id, "state": state, "now": now})
    if not closed:  # raising rolls the records back too
        raise errors.WaitNotOpen(wait_id, (yield from wait_state(wait_id)))


def wait_closed(write: FencedWrite, wait_id: str, state: str) -> Flow[NotLanded | None]:
    done = yield from records_landed(write.fence.run_id, write.records, write.resume)
    if done is None:
        done = (yield from wait_state(wait_id)) == state
    return None if done else NOT_LANDED


def suspend(
    write: FencedWrite, wake_at: float | None, wait_ids: Sequence[str], now: float,
    children: Sequence[str] = (),
) -> Flow[None]:
    yield Journal(write)
    for wait_id in wait_ids:
        state = yield from wait_state(wait_id)
        if state != WaitState.OPEN:  # an event arrived: do not sleep (the records roll back)
            raise errors.WaitNotOpen(wait_id, state)
    # A child that ended is read here; one that ends after this waits for
    # the commit (`child_status` locks it) and its trigger then wakes the run.
    yield from _check_children(children)
    me = yield one("get_run", {"run_id": write.fence.run_id})
    if me is not None and me["cancel_requested"] is not None:
        raise errors.CancelRequested(f"run {write.fence.run_id}: a cancel was requested")
    yield execute("suspend", {**fence_params(write.fence), "wake_at": wake_at, "now": now})
    if wake_at is not None and wake_at <= now:
        yield execute("notify_work")  # due already: claimable at once


def suspended(write: FencedWrite) -> Flow[NotLanded | None]:
    fence = write.fence
    done = yield from records_landed(fence.run_id, write.records, write.resume)
    if done is None:
        row = yield one("get_run", {"run_id": fence.run_id})
        done = row is not None and (row["status"], row["epoch"]) == (RunStatus.WAITING, fence.epoch)
    return None if done else NOT_LANDED


def revoke_wait(wait_id: str, now: float, where: str) -> Flow[WaitRow]:
    row = yield one("get_wait", {"wait_id": wait_id})
    if row is None:
        raise errors.SteadError(f"no wait {wait_id!r} in {where}")
    # Lock the run (as a delivery does), then read the wait again under the lock.
    yield execute("lock_run", {"run_id": row["run_id"]})
    wait = _rows.wait((yield one("get_wait", {"wait_id": wait_id})) or row)
    if wait.state != WaitState.OPEN:
        raise errors.WaitNotOpen(wait_id, wait.state)
    yield execute("close_wait", {"wait_id": wait_id, "state": WaitState.REVOKED, "now": now})
    if (yield count("wake", {"run_id": wait.run_id, "now": now})):
        yield execute("notify_work")
    return wait.evolve(state=WaitState.REVOKED, closed_at=now)


def wait_revoked(wait_id: str) -> Flow[WaitRow | NotLanded]:
    row = yield one("get_wait", {"wait_id": wait_id})
    if row is None or row["state"] != WaitState.REVOKED:
        return NOT_LANDED
    return _rows.wait(row)


# -- events ---------------------------------------------------------------------
def deliver(event: EventRow, judge: Judge, now: float) -> Flow[tuple[Judgement, EventRow]]:
    """Judge and store `event`: the run is locked first, so a delivery, a
    suspension and a revocation of one run happen one at a time."""
    key = {"run_id": event.run_id, "event_id": event.event_id}
    yield execute("lock_run", key)
    found = yield one("get_event", key)
    run = yield one("get_run", key)
    waits = tuple(_rows.wait(r) for r in (yield rows("run_waits", key)))
    versions: dict[str, int] = {}
    for w in waits:
        state = yield one("read_state", {"task_key": w.task_key})
        versions[w.task_key] = 0 if state is None else int(state["version"])
    policies: frozenset[str | None] = frozenset()
    if run is not None and any(w.state == WaitState.OPEN and w.policy_bound for w in waits):
        code = {"code": f"{run['workflow']}@{run['version']}", "now": now}
        policies = frozenset(r["policy_version"] for r in (yield rows("live_policies", code)))
    ctx = DeliveryContext(
        run=None if run is None else _rows.run(run), waits=waits, state_versions=versions,
        existing=None if found is None else _rows.event(found), now=now,
        live_policies=policies,
    )
    verdict = judge(ctx)
    if verdict.verdict == Verdict.DUPLICATE:
        assert ctx.existing is not None
        return verdict, ctx.existing
    stored = dataclasses.replace(
        event, wait_id=verdict.wait_id or event.wait_id, verdict=verdict.verdict,
        reason=verdict.reason, detail=verdict.detail, received_at=now,
    )
    if verdict.reason in UNAUTHENTICATED:
        # Anyone can send these: keep what identifies them, not what they carry.
        stored = dataclasses.replace(stored, payload=digest(stored.payload),
                                     bind=digest(stored.bind))
    yield execute("insert_event", _rows.event_params(stored))
    if verdict.verdict == Verdict.REJECTED:
        yield from _rejections.trim(event.run_id, run is not None, now)
    if verdict.reason == RejectReason.BAD_TOKEN and verdict.wait_id is not None:
        yield execute("count_bad_token",
                      {"wait_id": verdict.wait_id, "lock": verdict.locks_wait, "now": now})
    if verdict.verdict == Verdict.ACCEPTED and verdict.wait_id is not None:
        yield execute("consume_wait",
                      {"wait_id": verdict.wait_id, "event_id": event.event_id, "now": now})
        if (yield count("wake", {"run_id": event.run_id, "now": now})):
            yield execute("notify_work")
    return verdict, stored


# How much of an unauthenticated event's JSON text is kept, besides its digest.
DIGEST_HEAD = 200


def digest(text: str) -> str:
    """JSON text standing for `text`: its sha256, its size and its first
    characters; `text` itself when it is no longer than that."""
    if len(text) <= DIGEST_HEAD:
        return text
    return json.dumps({"omitted": "only a digest of this event is kept",
                       "sha256": hashlib.sha256(text.encode()).hexdigest(),
                       "bytes": len(text.encode()), "head": text[:DIGEST_HEAD]})


def unlock_wait(wait_id: str, where: str) -> Flow[WaitRow]:
    """Reset an open wait's bad-token count and lift its lock."""
    row = yield one("get_wait", {"wait_id": wait_id})
    if row is None:
        raise errors.SteadError(f"no wait {wait_id!r} in {where}")
    yield execute("lock_run", {"run_id": row["run_id"]})
    if not (yield count("unlock_wait", {"wait_id": wait_id})):
        raise errors.WaitNotOpen(wait_id, (yield from wait_state(wait_id)))
    return _rows.wait((yield one("get_wait", {"wait_id": wait_id})) or row)


def delivered(
    event: EventRow, attempted: tuple[Judgement, EventRow] | None,
) -> Flow[tuple[Judgement, EventRow] | NotLanded]:
    # Stored means this delivery landed (a duplicate stores nothing).
    found = yield one("get_event", {"run_id": event.run_id, "event_id": event.event_id})
    if found is None or attempted is None:
        return NOT_LANDED
    return attempted[0], _rows.event(found)


# -- the operator's audit ------------------------------------------------------------
def record_action(row: ActionRow) -> Flow[ActionRow]:
    yield execute("insert_operator_action", dataclasses.asdict(row))
    return row


# -- task state -------------------------------------------------------------------
def update_state(
    write: FencedWrite, task_key: str, change: StateChange, now: float,
) -> Flow[tuple[StateRow | None, Record]]:
    """Compare-and-set: the fence is checked (and the run locked) first, then
    the task key is locked, also while it has no row yet."""
    fence, records = write.fence, write.records
    if (yield one("fence", fence_params(fence))) is None:
        raise stale(fence)
    yield execute("lock_state", {"task_key": task_key})
    row = yield one("read_state", {"task_key": task_key})
    current = None if row is None else _rows.state(row)
    data, status, payload = change(current)
    last = records[-1].evolve(status=status, payload=payload)
    result = current
    if data is not None:
        version = (current.version if current else 0) + 1
        params = {"task_key": task_key, "version": version, "data": data,
                  "run_id": fence.run_id, "now": now}
        yield execute("upsert_state", params)
        yield execute("insert_state_history", params)
        result = StateRow(task_key, version, data, fence.run_id, now)
    yield Journal(dataclasses.replace(write, records=[*records[:-1], last]), checked=True)
    return result, last


def set_state(task_key: str, change: OutsideChange, author: str, why: str,
              now: float) -> Flow[StateRow]:
    """Compare-and-set from outside any run: the task key is locked, `change`
    makes the new data from the current state (raising refuses it), and the
    new version is written with who and why."""
    yield execute("lock_state", {"task_key": task_key})
    row = yield one("read_state", {"task_key": task_key})
    data = change(None if row is None else _rows.state(row))
    version = (int(row["version"]) if row is not None else 0) + 1
    params = {"task_key": task_key, "version": version, "data": data, "run_id": "",
              "now": now, "author": author, "why": why}
    yield execute("upsert_state", params)
    yield execute("insert_state_change", params)
    return StateRow(task_key, version, data, None, now, author, why)


def state_set(task_key: str, attempted: StateRow | None) -> Flow[StateRow | NotLanded]:
    row = yield one("read_state", {"task_key": task_key})
    if attempted is None or row is None or int(row["version"]) != attempted.version \
            or row["data"] != attempted.data:
        return NOT_LANDED
    return attempted


def state_updated(
    write: FencedWrite, attempted: tuple[StateRow | None, Record] | None,
) -> Flow[tuple[StateRow | None, Record] | NotLanded]:
    if attempted is None:
        return NOT_LANDED
    written = [*write.records[:-1], attempted[1]]
    done = yield from records_landed(write.fence.run_id, written)
    return attempted if done else NOT_LANDED



# -- intents ------------------------------------------------------------------------
def latest_intent(run_id: str) -> Flow[IntentRow | None]:
    row = yield one("latest_intent", {"run_id": run_id})
    return None if row is None else _rows.intent(row)


def revise_intent(
    run_id: str, revise: Revise, author: str, why: str, now: float, where: str, *,
    write: FencedWrite | None = None, resume: str | None = None,
) -> Flow[tuple[IntentRow, RunRow]]:
    """Add the next version of a run's intent, as `revise` makes it from the
    one in force. With `write`, its holder does it (the fence is checked, its
    records are journaled with it); with `resume`, the run must be stopped in
    that status and is made claimable again, in the same transaction."""
    yield execute("lock_run", {"run_id": run_id})
    if write is not None and (yield one("fence", fence_params(write.fence))) is None:
        raise stale(write.fence)
    row = yield one("get_run", {"run_id": run_id})
    if row is None:
        raise unknown_run(run_id, where)
    run = _rows.run(row)
    if resume is not None and run.status != resume:
        raise errors.NotStopped(
            f"run {run_id} is {run.status}, not {resume}: nothing to decide "
            "(was it decided already?)")
    current = yield from latest_intent(run_id)
    new = IntentRow(run_id, (current.version if current else 0) + 1, revise(current, run),
                    author, why, now)
    yield execute("insert_intent", _rows.intent_params(new))
    yield execute("set_intent_version", {"run_id": run_id, "version": new.version})
    if write is not None and (write.records or write.resume):
        yield Journal(write, checked=True)
    if resume is not None:
        resumed = yield one("resume_stopped", {"run_id": run_id, "expect": resume, "now": now})
        run = _rows.run(resumed)
        yield execute("notify_work")
    else:
        run = run.evolve(intent_version=new.version)
    return new, run


def intent_revised(
    run_id: str, attempted: tuple[IntentRow, RunRow] | None,
) -> Flow[tuple[IntentRow, RunRow] | NotLanded]:
    current = yield from latest_intent(run_id)
    if attempted is None or current is None or (current.version, current.intent) != (
            attempted[0].version, attempted[0].intent):
        return NOT_LANDED
    row = yield one("get_run", {"run_id": run_id})
    return NOT_LANDED if row is None else (attempted[0], _rows.run(row))


def guarded_journal(write: FencedWrite, guard: Guard, now: float) -> Flow[None]:
    """Journal `write` only if `guard` allows it under the intent in force now
    (read under the fence, so no renewal or revocation slips in between)."""
    if (yield one("fence", fence_params(write.fence))) is None:
        raise stale(write.fence)
    guard((yield from latest_intent(write.fence.run_id)), now)
    yield Journal(write, checked=True)


def end_stopped(
    run_id: str, expect_status: str, status: str, error: str, now: float, where: str,
) -> Flow[RunRow]:
    """End a run stopped as `expect_status` with the terminal `status`."""
    row = yield one("end_stopped", {"run_id": run_id, "expect": expect_status,
                                    "status": status, "error": error, "now": now})
    if row is None:
        raise (yield from not_stopped(run_id, expect_status, where))
    return _rows.run(row)


def not_stopped(run_id: str, expect_status: str, where: str) -> Flow[errors.SteadError]:
    """Why a decision on a run stopped as `expect_status` found nothing to decide."""
    current = yield one("get_run", {"run_id": run_id})
    if current is None:
        return unknown_run(run_id, where)
    return errors.NotStopped(
        f"run {run_id} is {current['status']}, not {expect_status}: "
        "nothing to decide (was it decided already?)")


def takeover_context(
    run_id: str, journal: bool,
) -> Flow[tuple[list[Record], list[IntentRow], ResumeRecord | None]]:
    """What a takeover reads, in one round trip: the journal (if `journal`),
    the intent's versions and the last resume record."""
    records = [_rows.record(r) for r in (yield rows("load_journal", {"run_id": run_id}))] \
        if journal else []
    intents = [_rows.intent(r) for r in (yield rows("list_intents", {"run_id": run_id}))]
    resumes = [_rows.resume(r) for r in (yield rows("list_resumes", {"run_id": run_id}))]
    return records, intents, resumes[-1] if resumes else None


# -- deploys: heartbeats, stranded runs, migrations, imports ------------------------
def heartbeat(worker_id: str, served: Sequence[tuple[str, str]], now: float,
              forget_before: float, policy_version: str | None,
              live_until: float) -> Flow[None]:
    """Say `worker_id` is alive until `live_until`, serves each `(code, role)`
    and runs `policy_version`; forget heartbeats older than `forget_before`."""
    for code, role in served:
        yield execute("heartbeat", {"worker_id": worker_id, "code": code, "role": role,
                                    "now": now, "policy_version": policy_version,
                                    "live_until": live_until})
    yield execute("forget_hosts", {"before": forget_before})


def host_stopped(worker_id: str, now: float) -> Flow[None]:
    yield execute("host_stopped", {"worker_id": worker_id, "now": now})


def stranded(now: float, since: float, limit: int, lease_now: float | None,
             workflow: str | None = None) -> Flow[list[Stranded]]:
    found = yield rows("stranded_runs", {"now": now, "since": since, "limit": limit,
                                         "lease_now": lease_now, "workflow": workflow})
    return [Stranded(_rows.run(r), r["hosted_at"]) for r in found]


def hosts(limit: int) -> Flow[list[HostRow]]:
    return [_rows.host(r) for r in (yield rows("worker_hosts", {"limit": limit}))]


def _movable(run: RunRow, lease_now: float | None, what: str) -> Flow[None]:
    """A person may migrate or roll back only a live run no worker holds
    (its lease judged by the database's clock, or `lease_now`)."""
    if not run.live:
        raise errors.MigrationRefused(
            f"run {run.run_id} is {run.status}: there is nothing to {what}")
    if run.lease_owner is None:
        return
    now = float((yield one("lease_now", {"lease_now": lease_now}))["now"])
    if (run.lease_expires_at or 0.0) > now:
        raise errors.MigrationRefused(
            f"run {run.run_id} is held by worker {run.lease_owner} (lease until "
            f"{run.lease_expires_at:.0f}); stop that worker or wait for the run to suspend, "
            f"then {what} it")


def migrate_run(plan: MigrationPlan, fence: Fence | None, resume: ResumeRecord | None,
                now: float, where: str, lease_now: float | None,
                ) -> Flow[tuple[RunRow, MigrationRow]]:
    """Apply `plan`: archive the journal, write the migrated one, move the
    run to the new version and input, and record the migration (and, for a
    person's migration, its resume record), in one transaction. By the
    run's holder (`fence`: it keeps its lease) or by a person (the run must
    be live and held by no one; its epoch moves on)."""
    run_id = plan.run_id
    yield execute("lock_run", {"run_id": run_id})
    row = yield one("get_run", {"run_id": run_id})
    if row is None:
        raise unknown_run(run_id, where)
    run = _rows.run(row)
    if fence is not None:
        if (yield one("fence", fence_params(fence))) is None:
            raise stale(fence)
    else:
        yield from _movable(run, lease_now, "migrate")
    length = int((yield one("next_seq", {"run_id": run_id}))["seq"])
    if (run.version, run.input, length) != (plan.from_version, plan.old_input,
                                            plan.records_before):
        raise errors.MigrationRefused(
            f"run {run_id} moved while its migration was made (now version {run.version}, "
            f"{length} journal record(s); the migration was made from version "
            f"{plan.from_version} and {plan.records_before}); nothing changed, try again")
    number = len((yield rows("list_migrations", {"run_id": run_id}))) + 1
    yield execute("archive_journal", {"run_id": run_id, "migration": number})
    yield execute("delete_journal", {"run_id": run_id})
    for r in plan.records:
        yield execute("insert_record", _rows.record_params(run_id, r))
    code = {"run_id": run_id, "version": plan.to_version, "input": plan.new_input, "now": now}
    if fence is not None:
        moved = yield one("set_code_fenced", {**code, **fence_params(fence)})
    else:
        moved = yield one("set_code", code)
    new = _rows.run(moved)
    made = MigrationRow(run_id, number, plan.from_version, plan.to_version, plan.old_input,
                        plan.new_input, plan.records_before, len(plan.records), plan.author,
                        now, new.epoch)
    yield execute("insert_migration", _rows.migration_params(made))
    if resume is not None:
        yield execute("insert_resume", _rows.resume_params(
            dataclasses.replace(resume, epoch=new.epoch, at=now)))
    if fence is None:
        yield execute("notify_work")
    return new, made


def migrated(run_id: str, plan: MigrationPlan
             ) -> Flow[tuple[RunRow, MigrationRow] | NotLanded]:
    found = [_rows.migration(r) for r in (yield rows("list_migrations", {"run_id": run_id}))]
    row = yield one("get_run", {"run_id": run_id})
    if not found or row is None:
        return NOT_LANDED
    last = found[-1]
    if (last.from_version, last.to_version, last.records_before, last.new_input) != (
            plan.from_version, plan.to_version, plan.records_before, plan.new_input):
        return NOT_LANDED
    return _rows.run(row), last


def rollback_run(run_id: str, author: str, resume: ResumeRecord, now: float, where: str,
                 lease_now: float | None) -> Flow[tuple[RunRow, MigrationRow]]:
    """Undo the run's last migration: put its archived journal, version and
    input back, if nothing was journaled since."""
    yield execute("lock_run", {"run_id": run_id})
    row = yield one("get_run", {"run_id": run_id})
    if row is None:
        raise unknown_run(run_id, where)
    run = _rows.run(row)
    found = [_rows.migration(r) for r in (yield rows("list_migrations", {"run_id": run_id}))]
    if not found or found[-1].rolled_back_at is not None:
        raise errors.MigrationRefused(f"run {run_id} has no migration to roll back")
    last = found[-1]
    yield from _movable(run, lease_now, "roll back")
    length = int((yield one("next_seq", {"run_id": run_id}))["seq"])
    if length != last.records_after or run.version != last.to_version:
        raise errors.MigrationRefused(
            f"run {run_id} went on after its migration to version {last.to_version} "
            f"({length - last.records_after} record(s) journaled since): rolling back would "
            "lose them; nothing changed")
    yield execute("delete_journal", {"run_id": run_id})
    yield execute("restore_journal", {"run_id": run_id, "migration": last.number})
    moved = yield one("set_code", {"run_id": run_id, "version": last.from_version,
                                   "input": last.old_input, "now": now})
    new = _rows.run(moved)
    yield execute("mark_rolled_back", {"run_id": run_id, "number": last.number, "now": now,
                                       "author": author})
    yield execute("insert_resume", _rows.resume_params(
        dataclasses.replace(resume, epoch=new.epoch, at=now, from_seq=last.records_before)))
    yield execute("notify_work")
    return new, dataclasses.replace(last, rolled_back_at=now, rolled_back_by=author)


def rolled_back(run_id: str) -> Flow[tuple[RunRow, MigrationRow] | NotLanded]:
    found = [_rows.migration(r) for r in (yield rows("list_migrations", {"run_id": run_id}))]
    row = yield one("get_run", {"run_id": run_id})
    if not found or found[-1].rolled_back_at is None or row is None:
        return NOT_LANDED
    return _rows.run(row), found[-1]


def import_run(run: RunRow, journal: Sequence[Record], waits: Sequence[WaitRow],
               state: StateRow | None, where: str) -> Flow[RunRow]:
    """Store a run exported from another database: its row (no lease), its
    journal, its waits, and its task state if the task has none here.
    Refused if a run with its id exists."""
    params = {name: getattr(run, name) for name in (
        "run_id", "workflow", "version", "task_id", "status", "input", "result", "error",
        "epoch", "created_at", "updated_at", "wake_at")}
    row = yield one("import_run", params)
    if row is None:
        raise errors.InvalidInput(
            f"{where} already holds a run {run.run_id} (or a live run of task "
            f"{run.task_id!r}); nothing was imported")
    for r in journal:
        yield execute("insert_record", _rows.record_params(run.run_id, r))
    for w in waits:
        yield execute("import_wait", {name: getattr(w, name) for name in (
            "wait_id", "run_id", "addr", "kind", "bind", "schema", "token_hash", "task_key",
            "expires_at", "state", "event_id", "created_at", "closed_at")})
    if state is not None:
        yield execute("lock_state", {"task_key": state.task_key})
        if (yield one("read_state", {"task_key": state.task_key})) is None:
            params = {"task_key": state.task_key, "version": state.version, "data": state.data,
                      "run_id": run.run_id, "now": state.updated_at or 0.0}
            yield execute("upsert_state", params)
            yield execute("insert_state_history", params)
    return _rows.run(row)


def imported(run: RunRow) -> Flow[RunRow | NotLanded]:
    row = yield one("get_run", {"run_id": run.run_id})
    return NOT_LANDED if row is None else _rows.run(row)
# -- workspaces -----------------------------------------------------------------------
# The content of a blob, by its sha256 (read when the save needs it: only the
# blobs the store does not hold yet are read and sent).
BlobReader = Callable[[str], bytes]
# Blobs read from files in one go off the loop: few hops, bounded memory.
BLOBS_PER_READ = 64


def save_snapshot(
    write: FencedWrite, snapshot: SnapshotRow, hashes: Sequence[str], read: BlobReader,
    more: Sequence[SnapshotRow] = (),
) -> Flow[int]:
    """Store `snapshot` with the blobs of `hashes` it lacks, and journal
    `write`, under the fence: a stale worker stores nothing. Returns the bytes
    of blobs it added."""
    if (yield one("fence", fence_params(write.fence))) is None:
        raise stale(write.fence)
    wanted = list(dict.fromkeys(hashes))
    present = {r["sha256"] for r in (yield rows("blobs_present", {"hashes": wanted}))} \
        if wanted else set()
    missing = [h for h in wanted if h not in present]
    stored = 0
    for start in range(0, len(missing), BLOBS_PER_READ):
        batch = missing[start:start + BLOBS_PER_READ]
        found = yield OffLoop(functools.partial(_read_all, read, batch))
        for sha256, data in zip(batch, found, strict=True):
            yield execute("insert_blob", {"sha256": sha256, "size": len(data), "data": data})
            stored += len(data)
    for other in more:
        yield execute("insert_snapshot", _rows.snapshot_params(other))
    yield execute("insert_snapshot", _rows.snapshot_params(snapshot.evolve(stored_bytes=stored)))
    yield Journal(write, checked=True)
    return stored


def _read_all(read: BlobReader, hashes: Sequence[str]) -> list[bytes]:
    return [read(h) for h in hashes]


def snapshot_saved(write: FencedWrite, seq: int, attempted: int | None) -> Flow[int | NotLanded]:
    found = yield one("get_snapshot", {"run_id": write.fence.run_id, "seq": seq})
    return NOT_LANDED if found is None else int(found["stored_bytes"])


def read_blobs(hashes: Sequence[str]) -> Flow[dict[str, bytes]]:
    found = yield rows("get_blobs", {"hashes": list(hashes)})
    return {str(r["sha256"]): bytes(r["data"]) for r in found}
# -- child runs -------------------------------------------------------------------
def _check_children(children: Sequence[str]) -> Flow[None]:
    """Raise `ChildEnded` if one of `children` is no longer live."""
    for child_id in children:
        row = yield one("child_status", {"run_id": child_id})
        if row is None or row["status"] in TERMINAL:
            raise errors.ChildEnded(f"child run {child_id}",
                                    "missing" if row is None else str(row["status"]))


def start_child(write: FencedWrite, new: NewRun, now: float) -> Flow[tuple[RunRow, Record]]:
    """Start the child run `new` of the fence's run and journal its id there
    (the last of `write.records`), in one transaction: a takeover finds both
    or neither. The child's id is derived from the parent and the call, so a
    start found done already is read back, not made twice. A live run of the
    child's task that this parent did not start is journaled as an error."""
    fence, records = write.fence, write.records
    yield execute("lock_run", {"run_id": fence.run_id})
    if (yield one("fence", fence_params(fence))) is None:
        raise stale(fence)
    found = yield one("get_run", {"run_id": new.run_id})
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
    if not (yield from records_landed(write.fence.run_id, written)):
        return NOT_LANDED
    row = yield one("get_run", {"run_id": attempted[0].run_id})
    return NOT_LANDED if row is None else (_rows.run(row), attempted[1])


# -- cancellation -------------------------------------------------------------------
def request_cancel(run_id: str, now: float, where: str) -> Flow[RunRow]:
    """Cancel a live run and its live children, recursively. A running run
    is asked to: the worker that holds it, or the one that takes it over
    from a dead worker (whose effect may be in flight), ends it as
    cancelled at its next call boundary, after any effect's outcome is
    journaled. Any other live run (pending, waiting, stopped for a person)
    is cancelled at once."""
    yield execute("lock_run", {"run_id": run_id})
    row = yield one("get_run", {"run_id": run_id})
    if row is None:
        raise unknown_run(run_id, where)
    run = _rows.run(row)
    if not run.live:
        return run
    if run.status == RunStatus.RUNNING:
        yield execute("request_cancel", {"run_id": run_id, "now": now})
        run = run.evolve(cancel_requested=run.cancel_requested or now)
    else:
        row = yield one("cancel_run", {"run_id": run_id, "now": now})
        run = _rows.run(row)
    for child in (yield rows("live_children", {"run_id": run_id})):
        yield from request_cancel(str(child["run_id"]), now, where)
    return run


def cancel_requests(run_ids: Sequence[str]) -> Flow[list[str]]:
    found = yield rows("cancel_requests", {"run_ids": list(run_ids)})
    return [str(r["run_id"]) for r in found]


# -- schedules ------------------------------------------------------------------------
# Given the stored schedule (None: never seen) and the time, returns the
# ticks to fire now and the next tick not yet fired (pure: no I/O).
Due = Callable[[ScheduleRow | None, float], tuple[list[float], float]]


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


# -- retention ---------------------------------------------------------------------------
def prunable(cutoff: float, limit: int, run_ids: Sequence[str] | None = None
             ) -> Flow[list[str]]:
    found = yield rows("prunable_runs", {
        "cutoff": cutoff, "limit": limit,
        "run_ids": None if run_ids is None else list(run_ids)})
    return [str(r["run_id"]) for r in found]


def export_runs(run_ids: Sequence[str]) -> Flow[list[RunExport]]:
    """Everything stored of each run."""
    out = []
    for run_id in run_ids:
        key = {"run_id": run_id}
        row = yield one("get_run", key)
        if row is None:
            continue
        out.append(RunExport(
            run=_rows.run(row),
            journal=tuple(_rows.record(r) for r in (yield rows("load_journal", key))),
            resumes=tuple(_rows.resume(r) for r in (yield rows("list_resumes", key))),
            waits=tuple(_rows.wait(r) for r in (yield rows("run_waits", key))),
            events=tuple(_rows.event(r) for r in (yield rows(
                "list_events", {**key, "limit": 1_000_000}))),
            intents=tuple(_rows.intent(r) for r in (yield rows("list_intents", key))),
        ))
    return out


def delete_runs(cutoff: float, run_ids: Sequence[str]) -> Flow[list[str]]:
    """Delete those of `run_ids` that may still be pruned (checked again
    here, in the deleting transaction), with everything stored of them."""
    keep = yield from prunable(cutoff, len(run_ids) or 1, run_ids)
    if keep:
        ids = {"run_ids": keep}
        for query in ("delete_journals", "delete_resumes", "delete_waits", "delete_events",
                      "delete_intents", "delete_migrations", "delete_journal_archive",
                      "delete_lineage", "delete_snapshots", "delete_operator_actions",
                      "delete_rejected_tally", "delete_streams", "delete_runs"):
            yield execute(query, ids)
    return keep
# -- batch starts and queues ------------------------------------------------------
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
    if plain:
        for row in (yield rows("insert_runs", {"runs": json.dumps(plain)})):
            run = _rows.run(row)
            inserted[run.run_id] = run
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


def queue_claimed(queue: Queue, params: dict[str, Any]) -> Flow[list[RunRow]]:
    """The read-back of a queue's claim: the runs of the queue that very claim
    leased (none: it did not land, and claiming nothing is a fine answer)."""
    taken = yield rows("claimed_by", params)
    return [run for run in map(_rows.run, taken) if run.queue == queue.name]
