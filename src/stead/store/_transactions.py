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
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from stead import errors
from stead.queues import Queue
from stead.records import (
    UNAUTHENTICATED,
    DeliveryContext,
    EventRow,
    Fence,
    IntentRow,
    Judgement,
    NewRun,
    Record,
    RejectReason,
    ResumeRecord,
    RunRow,
    RunStatus,
    StateRow,
    Verdict,
    WaitRow,
    WaitState,
    task_taken,
)
from stead.store import _rows
from stead.store._rows import Row
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
)

R = TypeVar("R")
# Judges a delivery inside its transaction (pure: no I/O).
Judge = Callable[[DeliveryContext], Judgement]
# Given the current task state (or None), returns the new data (JSON text, or
# None for a refused change) and the status and payload of the journal record
# that says what happened (the last of the records written with it).
StateChange = Callable[[StateRow | None], tuple[str | None, str, str]]
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
        row = yield one("insert_run", params)
        if row is not None:
            if new.intent is None:
                return _rows.run(row), True
            first = IntentRow(new.run_id, 1, new.intent, "client", new.intent_why, now)
            yield execute("insert_intent", _rows.intent_params(first))
            yield execute("set_intent_version", {"run_id": new.run_id, "version": 1})
            return _rows.run(row).evolve(intent_version=1), True
        if new.task_id is None and new.dedup_key is None:
            break
        # A concurrent start of this task (or dedup key) won the insert: read its run.
    return None


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
def renew(fences: Sequence[Fence], expires: float) -> Flow[list[Fence]]:
    """Extend the leases still held; the fences that were lost."""
    held_rows = yield rows("renew", {
        "expires": expires, "run_ids": [f.run_id for f in fences],
        "epochs": [f.epoch for f in fences], "workers": [f.worker_id for f in fences],
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
) -> Flow[None]:
    yield Journal(write)
    for wait_id in wait_ids:
        state = yield from wait_state(wait_id)
        if state != WaitState.OPEN:  # an event arrived: do not sleep (the records roll back)
            raise errors.WaitNotOpen(wait_id, state)
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
    ctx = DeliveryContext(
        run=None if run is None else _rows.run(run), waits=waits, state_versions=versions,
        existing=None if found is None else _rows.event(found), now=now,
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
        for i, n in enumerate(news) if n.intent is None
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
    exclude, now, expires), no more than its limits leave room for. The
    queue's lock is taken first, so the counts stay true until the commit."""
    yield execute("lock_queue", {"queue": queue.name})
    load = yield one("queue_load", {
        "queue": queue.name, "worker_id": params["worker_id"], "now": params["now"],
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
