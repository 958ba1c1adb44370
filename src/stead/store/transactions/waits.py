"""Waits and the events delivered to them: opening, closing, suspending on,
revoking and unlocking a wait, and the judged delivery of an event."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from stead import errors
from stead.records import RunStatus
from stead.store import _rejections, _rows
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
    together,
)
from stead.store.transactions import common, journal, quotas, runs

# The records of waits are imported where a flow reads one: a store that
# lists runs builds none of them (see `stead.records`).
if TYPE_CHECKING:
    from stead.records import DeliveryContext, EventRow, Judgement, RunRow, WaitRow
    from stead.store.local_work import Lessee


def wait_state(wait_id: str) -> Flow[str]:
    return _state_of((yield one("get_wait", {"wait_id": wait_id})))


def _state_of(row: Any) -> str:
    """A `get_wait` row's state ("missing": no row)."""
    return "missing" if row is None else str(row["state"])


def open_wait(write: FencedWrite, wait: WaitRow) -> Flow[None]:
    yield from quotas.open_wait(write.fence.run_id)
    yield Journal(write)
    yield from common.insert_wait(wait)


def wait_and_event(wait_id: str, run_id: str | None = None,
                   ) -> Flow[tuple[WaitRow, EventRow | None] | None]:
    row = yield (one("wait_and_event", {"wait_id": wait_id}) if run_id is None else
                 one("run_wait_and_event", {"wait_id": wait_id, "run_id": run_id}))
    return None if row is None else (_rows.wait(row), _rows.joined_event(row))


def wait_opened(wait_id: str) -> Flow[NotLanded | None]:
    found = yield one("get_wait", {"wait_id": wait_id})
    return None if found is not None else NOT_LANDED


def close_wait(write: FencedWrite, wait_id: str, state: str, now: float) -> Flow[None]:
    yield Journal(write)
    closed = yield count("close_wait", {"wait_id": wait_id, "state": state, "now": now})
    if not closed:  # raising rolls the records back too
        raise errors.WaitNotOpen(wait_id, (yield from wait_state(wait_id)))


def wait_closed(write: FencedWrite, wait_id: str, state: str) -> Flow[NotLanded | None]:
    done = yield from journal.records_landed(write.fence.run_id, write.records, write.resume)
    if done is None:
        done = (yield from wait_state(wait_id)) == state
    return None if done else NOT_LANDED


def suspend(
    write: FencedWrite, wake_at: float | None, wait_ids: Sequence[str], now: float,
    children: Sequence[str] = (),
) -> Flow[None]:
    from stead.records import WaitState

    yield Journal(write)
    # What decides whether the run may sleep, read together (one round trip
    # on PostgreSQL), then judged in turn. A child that ended is read here;
    # one that ends after this waits for the commit (`child_status` locks it)
    # and its trigger then wakes the run.
    found = yield together(
        *(one("get_wait", {"wait_id": wait_id}) for wait_id in wait_ids),
        *(one("child_status", {"run_id": child_id}) for child_id in children),
        one("get_run", {"run_id": write.fence.run_id}))
    for wait_id, row in zip(wait_ids, found[:len(wait_ids)], strict=True):
        state = _state_of(row)
        if state != WaitState.OPEN:  # an event arrived: do not sleep (the records roll back)
            raise errors.WaitNotOpen(wait_id, state)
    runs.judge_children(children, found[len(wait_ids):-1])
    me = found[-1]
    if me is not None and me["cancel_requested"] is not None:
        raise errors.CancelRequested(f"run {write.fence.run_id}: a cancel was requested")
    yield execute("suspend", {**fence_params(write.fence), "wake_at": wake_at, "now": now})
    if wake_at is not None and wake_at <= now:
        yield execute("notify_work")  # due already: claimable at once


def suspended(write: FencedWrite) -> Flow[NotLanded | None]:
    fence = write.fence
    done = yield from journal.records_landed(fence.run_id, write.records, write.resume)
    if done is None:
        row = yield one("get_run", {"run_id": fence.run_id})
        done = row is not None and (row["status"], row["epoch"]) == (RunStatus.WAITING, fence.epoch)
    return None if done else NOT_LANDED


def revoke_wait(wait_id: str, now: float, where: str) -> Flow[WaitRow]:
    from stead.records import WaitState

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
    from stead.records import WaitState

    row = yield one("get_wait", {"wait_id": wait_id})
    if row is None or row["state"] != WaitState.REVOKED:
        return NOT_LANDED
    return _rows.wait(row)


# Judges a delivery inside its transaction (pure: no I/O). Its records are
# named, not imported (see above).
Judge = Callable[["DeliveryContext"], "Judgement"]


# What a delivery returns: the judgement, the event as stored, and the run
# if the delivery leased it to an idle worker of this process (`lessee`).
Delivered = tuple["Judgement", "EventRow", "RunRow | None"]


def deliver(event: EventRow, judge: Judge, now: float,
            lessee: Lessee | None = None) -> Flow[Delivered]:
    """Judge and store `event`: the run is locked first, so a delivery, a
    suspension and a revocation of one run happen one at a time. A run it
    wakes is leased to `lessee`'s idle worker, if one of this process hosts
    its code, in the same transaction (as a claim would lease it)."""
    from stead.records import UNAUTHENTICATED, DeliveryContext, RejectReason, Verdict, WaitState

    key = {"run_id": event.run_id, "event_id": event.event_id}
    # The run with its lock; then, in a read that the lock makes current (it
    # runs once the lock is held), the event stored under this id and the
    # waits, each with its task state's version: one round trip on PostgreSQL.
    run, joined = yield together(one("locked_run", key), rows("run_waits_and_event", key))
    found = _rows.joined_event(joined[0])
    listed = [r for r in joined if r["wait_id"] is not None]
    waits = tuple(_rows.wait(r) for r in listed)
    versions: dict[str, int] = {
        w.task_key: 0 if r["state_version"] is None else int(r["state_version"])
        for w, r in zip(waits, listed, strict=True)}
    policies: frozenset[str | None] = frozenset()
    if run is not None and any(w.state == WaitState.OPEN and w.policy_bound for w in waits):
        code = {"code": f"{run['workflow']}@{run['version']}", "now": now}
        policies = frozenset(r["policy_version"] for r in (yield rows("live_policies", code)))
    ctx = DeliveryContext(
        run=None if run is None else _rows.run(run), waits=waits, state_versions=versions,
        existing=found, now=now,
        live_policies=policies,
    )
    verdict = judge(ctx)
    if verdict.verdict == Verdict.DUPLICATE:
        assert ctx.existing is not None
        return verdict, ctx.existing, None
    stored = dataclasses.replace(
        event, wait_id=verdict.wait_id or event.wait_id, verdict=verdict.verdict,
        reason=verdict.reason, detail=verdict.detail, received_at=now,
    )
    if verdict.reason in UNAUTHENTICATED:
        # Anyone can send these: keep what identifies them, not what they carry.
        stored = dataclasses.replace(stored, payload=digest(stored.payload),
                                     bind=digest(stored.bind))
    if verdict.verdict == Verdict.ACCEPTED and verdict.wait_id is not None:
        taker = None
        if (lessee is not None and run is not None and run["status"] == RunStatus.WAITING
                and run["queue"] is None):
            taker = lessee.reserve(f"{run['workflow']}@{run['version']}")
        # Stored, the wait consumed, the run woken: one statement on PostgreSQL
        # (`stored.wait_id` is the verdict's wait). Idle workers are told unless
        # the run goes straight to a worker of this process: told, every idle
        # worker of the fleet would claim, to find the run leased.
        yield execute("accept_event", {**_rows.event_params(stored), "tell": taker is None})
        leased: RunRow | None = None
        if taker is not None and lessee is not None:
            row = yield one("lease_woken", {
                "run_id": event.run_id, "worker_id": taker.worker_id,
                "lease_seconds": taker.lease_seconds, "lease_now": lessee.lease_now,
                "now": now})
            leased = None if row is None else _rows.run(row)
            if leased is None:  # not leased after all: claimable, so say so
                yield execute("notify_work")
        return verdict, stored, leased
    yield execute("insert_event", _rows.event_params(stored))
    if verdict.verdict == Verdict.REJECTED:
        yield from _rejections.trim(event.run_id, run is not None, now)
    if verdict.reason == RejectReason.BAD_TOKEN and verdict.wait_id is not None:
        yield execute("count_bad_token",
                      {"wait_id": verdict.wait_id, "lock": verdict.locks_wait, "now": now})
    return verdict, stored, None


# How much of an unauthenticated event's JSON text is kept, besides its digest.
DIGEST_HEAD = 200


def digest(text: str) -> str:
    """JSON text standing for `text`: its sha256, its size and its first
    characters; `text` itself when it is no longer than that."""
    if len(text) <= DIGEST_HEAD:
        return text
    import hashlib  # here: a store that lists runs loads no digests (~1.4 ms)

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


def delivered(event: EventRow, attempted: Delivered | None) -> Flow[Delivered | NotLanded]:
    # Stored means this delivery landed (a duplicate stores nothing), and with
    # it the lease it took, if it took one.
    found = yield one("get_event", {"run_id": event.run_id, "event_id": event.event_id})
    if found is None or attempted is None:
        return NOT_LANDED
    return attempted[0], _rows.event(found), attempted[2]
