"""Journal writes on SQLite: a fenced write's statements inside a transaction
someone else holds (a flow's, or a group commit's)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead.store import _rows, sql_files
from stead.store.seam import FencedWrite, Journal, fence_params, stale

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import Fence, Record, ResumeRecord

Q = sql_files.queries("sqlite")


def write_fenced(conn: sqlite3.Connection, write: FencedWrite) -> None:
    """Insert `write`'s records and resume record, and end the run's attempt
    if it finishes, only if its fence holds: else raise `StaleLease` before
    anything is written. The first record's INSERT carries the fence itself,
    so an append is three statements: BEGIN, INSERT, COMMIT."""
    fence, records = write.fence, write.records
    if records:
        first = _rows.record_params(fence.run_id, records[0])
        first["fence_epoch"], first["worker_id"] = fence.epoch, fence.worker_id
        if conn.execute(Q["insert_record_fenced"], first).rowcount == 0:
            raise stale(fence)
        insert(conn, fence, records[1:], write.resume)
    else:
        if conn.execute(Q["fence"], fence_params(fence)).fetchone() is None:
            raise stale(fence)
        insert(conn, fence, records, write.resume)
    end = write.finish
    if end is not None:
        conn.execute(Q["finish"], {
            **fence_params(fence), "status": end.status, "result": end.result,
            "error": end.error, "now": end.now,
        })


def insert(
    conn: sqlite3.Connection, fence: Fence, records: Sequence[Record],
    resume: ResumeRecord | None,
) -> None:
    """Insert in a transaction that checked `fence`."""
    if len(records) == 1:
        conn.execute(Q["insert_record"], _rows.record_params(fence.run_id, records[0]))
    elif records:
        conn.executemany(
            Q["insert_record"], [_rows.record_params(fence.run_id, r) for r in records]
        )
    if resume is not None:
        conn.execute(Q["insert_resume"], _rows.resume_params(resume))


def apply(conn: sqlite3.Connection, step: Journal) -> None:
    """A flow's journal step."""
    write = step.write
    if step.checked:
        insert(conn, write.fence, write.records, write.resume)
    else:
        write_fenced(conn, write)
