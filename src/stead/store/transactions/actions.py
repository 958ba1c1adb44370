"""What is done to a run from outside its worker: cancelling it (and its
children), resuming or ending one stopped for a person, and the operator's audit."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead import errors
from stead.records import RunStatus
from stead.store import _rows
from stead.store.seam import NOT_LANDED, Flow, NotLanded, execute, one, rows
from stead.store.transactions import common

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import ActionRow, Record, RunRow


def cancel_run(run_id: str, now: float, where: str) -> Flow[RunRow]:
    row = yield one("cancel_run", {"run_id": run_id, "now": now})
    if row is None:  # not live: as it is
        row = yield one("get_run", {"run_id": run_id})
        if row is None:
            raise common.unknown_run(run_id, where)
    return _rows.run(row)


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
        raise common.unknown_run(run_id, where)
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
        return common.unknown_run(run_id, where)
    return errors.NotStopped(
        f"run {run_id} is {current['status']}, not {expect_status}: "
        "nothing to decide (was it decided already?)")


def record_action(row: ActionRow) -> Flow[ActionRow]:
    yield execute("insert_operator_action", dataclasses.asdict(row))
    return row
