"""What every transaction module reads with: one row or many as records,
and the error for a run that is not there; and how a new wait is written,
its request beside it, wherever a wait is made (opened, forked)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from stead import errors
from stead.store import _rows
from stead.store._rows import Row
from stead.store.seam import Flow, execute, one, rows

if TYPE_CHECKING:
    from stead.records import WaitRow

R = TypeVar("R")


def unknown_run(run_id: str, where: str) -> errors.UnknownRun:
    return errors.UnknownRun(f"no run {run_id!r} in {where}")


def read_one(name: str, params: dict[str, Any], convert: Callable[[Row], R]) -> Flow[R | None]:
    """The row query `name` finds, as a record; None if none."""
    row = yield one(name, params)
    return None if row is None else convert(row)


def read_all(name: str, params: dict[str, Any], convert: Callable[[Row], R]) -> Flow[list[R]]:
    return [convert(row) for row in (yield rows(name, params))]


def insert_wait(wait: WaitRow) -> Flow[None]:
    """A new wait's row, and what it asks (`wait_requests`), if anything."""
    yield execute("insert_wait", _rows.wait_params(wait))
    if wait.request is not None:
        yield execute("insert_wait_request", {"wait_id": wait.wait_id, "run_id": wait.run_id,
                                              "request": wait.request})
