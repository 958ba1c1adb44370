"""A task's state: the compare-and-set of its holder and of a person outside
any run, and its versions as they were."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from stead.records import StateRow
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
)
from stead.store.transactions import journal

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import Record

# Given the current task state (or None), returns the new data (JSON text, or
# None for a refused change) and the status and payload of the journal record
# that says what happened (the last of the records written with it).
StateChange = Callable[[StateRow | None], tuple[str | None, str, str]]


# Given the current task state (or None), returns the JSON text of the new
# data; raising refuses the change (nothing is written).
OutsideChange = Callable[[StateRow | None], str]


def state_version(task_key: str, version: int) -> Flow[StateRow | None]:
    """The task's state as it was at `version` (its history keeps each)."""
    row = yield one("state_version", {"task_key": task_key, "version": version})
    return None if row is None else _rows.state_history(row)


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
    done = yield from journal.records_landed(write.fence.run_id, written)
    return attempted if done else NOT_LANDED
