"""A run's intent: its versions, revised by the run's holder or a person, and
the journal writes guarded by the version in force."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stead import errors
from stead.records import IntentRow, RunRow
from stead.store import _rows
from stead.store.seam import (
    NOT_LANDED,
    FencedWrite,
    Flow,
    Journal,
    NotLanded,
    execute,
    fence_params,
    one,
    stale,
    together,
)
from stead.store.transactions import common

# Given the intent version in force (or None) and the run, returns the JSON
# text of the next version; raising refuses the change (nothing is written).
Revise = Callable[[IntentRow | None, RunRow], str]


# Given the intent version in force (or None) and the time, raises
# `GrantRefused` if the records about to be journaled are not allowed.
Guard = Callable[[IntentRow | None, float], None]


def latest_intent(run_id: str) -> Flow[IntentRow | None]:
    return _intent_of((yield one("latest_intent", {"run_id": run_id})))


def _intent_of(row: Any) -> IntentRow | None:
    """A `latest_intent` row's intent (None: no row)."""
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
        raise common.unknown_run(run_id, where)
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
    # Read together (one round trip on PostgreSQL): the fence's lock is held
    # when the intent is read.
    held, intent = yield together(one("fence", fence_params(write.fence)),
                                  one("latest_intent", {"run_id": write.fence.run_id}))
    if held is None:
        raise stale(write.fence)
    guard(_intent_of(intent), now)
    yield Journal(write, checked=True)
