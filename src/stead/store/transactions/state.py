"""A task's state: the compare-and-set of its holder and of a person outside
any run, and its versions as they were."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from stead.payloads import references
from stead.records import StateRow
from stead.store import _large, _large_state, _rows
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
)
from stead.store.transactions import journal

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.payloads.references import Reference
    from stead.records import Record

# Given the current task state (or None), returns the new data (JSON text, or
# None for a refused change) and the status and payload of the journal record
# that says what happened (the last of the records written with it).
StateChange = Callable[[StateRow | None], tuple[str | None, str, str]]


# Given the current task state (or None), returns the JSON text of the new
# data; raising refuses the change (nothing is written).
OutsideChange = Callable[[StateRow | None], str]


class Large:
    """A transaction's answer: the state in force or the new one is kept by
    reference, which the store writes by `update_referenced` or
    `set_referenced` (`store.base.state`); nothing was written."""


LARGE = Large()
# What a change's transaction answers: done (the state in force and the
# journal record as written; the version written), or why nothing was.
Updated = tuple[StateRow | None, "Record"] | Large | _large_state.Moved
Set = StateRow | Large | _large_state.Moved


def _kept_outside(current: StateRow | None) -> bool:
    """Whether the state in force is kept by reference (it cannot be read
    back inside the transaction: the store reads it first, or says it has no
    blob store to read it from)."""
    return current is not None and references.is_reference(current.data)


def _over(inline: int | None, *texts: str | None) -> bool:
    return inline is not None and any(t is not None and len(t) > inline for t in texts)


def state_version(task_key: str, version: int) -> Flow[StateRow | None]:
    """The task's state as it was at `version` (its history keeps each)."""
    row = yield one("state_version", {"task_key": task_key, "version": version})
    return None if row is None else _rows.state_history(row)


def update_state(
    write: FencedWrite, task_key: str, change: StateChange, now: float,
    inline: int | None = None,
) -> Flow[Updated]:
    """Compare-and-set: the fence is checked (and the run locked) first, then
    the task key is locked, also while it has no row yet. `inline`: the
    store's inline limit, when it keeps large values; a state in force or a
    new state or record over it is not written here (`LARGE`)."""
    fence, records = write.fence, write.records
    if (yield one("fence", fence_params(fence))) is None:
        raise stale(fence)
    yield execute("lock_state", {"task_key": task_key})
    row = yield one("read_state", {"task_key": task_key})
    current = None if row is None else _rows.state(row)
    if _kept_outside(current):
        return LARGE
    data, status, payload = change(current)
    if _over(inline, data, payload):
        return LARGE
    last = records[-1].evolve(status=status, payload=payload)
    result = yield from _write_version(task_key, data, fence.run_id, now, current)
    yield Journal(dataclasses.replace(write, records=[*records[:-1], last]), checked=True)
    return result, last


def _write_version(task_key: str, data: str | None, run_id: str, now: float,
                   current: StateRow | None) -> Flow[StateRow | None]:
    """Write `data` (None: nothing) as the task's next version by `run_id`."""
    if data is None:
        return current
    version = (current.version if current else 0) + 1
    params = {"task_key": task_key, "version": version, "data": data,
              "run_id": run_id, "now": now}
    yield execute("upsert_state", params)
    yield execute("insert_state_history", params)
    return StateRow(task_key, version, data, run_id, now)


@dataclasses.dataclass(frozen=True, slots=True)
class Referenced:
    """A change made before its transaction (`store.base.state`): the state
    it was made from as stored (`seen`), the new data as stored (None:
    refused), a reference or inline text, the blobs its references name
    (the state's, and the journal records') and the key the state's blob was
    sealed with."""

    seen: StateRow | None
    data: str | None
    state_refs: tuple[Reference, ...] = ()
    journal_refs: tuple[Reference, ...] = ()
    sealing: _large_state.Sealing | None = None


def update_referenced(write: FencedWrite, task_key: str, made: Referenced,
                      now: float) -> Flow[Updated]:
    """Commit a change made before this transaction, fenced, if the state is
    still the one it was made from (else `MOVED`, nothing written); the
    blobs are owned by the task's state (the state's) and by the run."""
    fence = write.fence
    if (yield one("fence", fence_params(fence))) is None:
        raise stale(fence)
    yield execute("lock_state", {"task_key": task_key})
    row = yield one("read_state", {"task_key": task_key})
    scope = _large_state.owner(task_key)
    if not _large_state.same(row, made.seen) or not (
            yield from _large_state.key_unchanged(made.sealing, scope)):
        return _large_state.MOVED
    result = yield from _write_version(task_key, made.data, fence.run_id, now, made.seen)
    yield Journal(write, checked=True)
    yield from _large_state.own(task_key, fence.run_id, made.state_refs, now)
    yield from _large.own(fence.run_id, made.journal_refs, now)
    return result, write.records[-1]


def set_state(task_key: str, change: OutsideChange, author: str, why: str,
              now: float, inline: int | None = None) -> Flow[Set]:
    """Compare-and-set from outside any run: the task key is locked, `change`
    makes the new data from the current state (raising refuses it), and the
    new version is written with who and why. `inline`: as `update_state`'s."""
    yield execute("lock_state", {"task_key": task_key})
    row = yield one("read_state", {"task_key": task_key})
    current = None if row is None else _rows.state(row)
    if _kept_outside(current):
        return LARGE
    data = change(current)
    if _over(inline, data):
        return LARGE
    return (yield from _write_change(task_key, data, author, why, now, current))


def _write_change(task_key: str, data: str, author: str, why: str, now: float,
                  current: StateRow | None) -> Flow[StateRow]:
    version = (current.version if current is not None else 0) + 1
    params = {"task_key": task_key, "version": version, "data": data, "run_id": "",
              "now": now, "author": author, "why": why}
    yield execute("upsert_state", params)
    yield execute("insert_state_change", params)
    return StateRow(task_key, version, data, None, now, author, why)


def set_referenced(task_key: str, made: Referenced, author: str, why: str,
                   now: float) -> Flow[Set]:
    """Commit a change from outside any run made before this transaction, if
    the state is still the one it was made from (else `MOVED`)."""
    yield execute("lock_state", {"task_key": task_key})
    row = yield one("read_state", {"task_key": task_key})
    if made.data is None or not _large_state.same(row, made.seen) or not (
            yield from _large_state.key_unchanged(made.sealing, _large_state.owner(task_key))):
        return _large_state.MOVED
    done = yield from _write_change(task_key, made.data, author, why, now, made.seen)
    yield from _large_state.own(task_key, None, made.state_refs, now)
    return done


def state_set(task_key: str, attempted: Set | None) -> Flow[Set | NotLanded]:
    if isinstance(attempted, Large | _large_state.Moved):
        return attempted  # wrote nothing
    row = yield one("read_state", {"task_key": task_key})
    if attempted is None or row is None or int(row["version"]) != attempted.version \
            or row["data"] != attempted.data:
        return NOT_LANDED
    return attempted


def state_updated(write: FencedWrite, attempted: Updated | None) -> Flow[Updated | NotLanded]:
    if isinstance(attempted, Large | _large_state.Moved):
        return attempted  # wrote nothing
    if attempted is None:
        return NOT_LANDED
    written = [*write.records[:-1], attempted[1]]
    done = yield from journal.records_landed(write.fence.run_id, written)
    return attempted if done else NOT_LANDED
