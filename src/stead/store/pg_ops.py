"""What the PostgreSQL store's writes share: row conversions, the fence, the
journal inserts, the read-backs that settle an unacknowledged commit, and
NOTIFY. Each takes the connection of the transaction it is part of."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, TypeVar

from stead import errors
from stead.records import EventRow, Fence, Record, ResumeRecord, RunRow, StateRow, WaitRow
from stead.store import sql_files
from stead.store.pg_connection import Conn

Q = sql_files.queries("postgres")
R = TypeVar("R")


def _fields(cls: type[Any]) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def row_to(cls: type[R], row: dict[str, Any]) -> R:
    """A record from a row, by field name (columns a newer schema added are ignored)."""
    return cls(**{k: row[k] for k in _fields(cls) if k in row})


def run_row(row: dict[str, Any]) -> RunRow:
    return row_to(RunRow, row)


def wait_row(row: dict[str, Any]) -> WaitRow:
    return row_to(WaitRow, row)


def event_row(row: dict[str, Any]) -> EventRow:
    return row_to(EventRow, row)


def state_row(row: dict[str, Any]) -> StateRow:
    return row_to(StateRow, row)


def record_params(run_id: str, r: Record) -> dict[str, Any]:
    return {"run_id": run_id, **dataclasses.asdict(r)}


def fence_params(fence: Fence) -> dict[str, Any]:
    return {"run_id": fence.run_id, "epoch": fence.epoch, "worker_id": fence.worker_id}


async def one(conn: Conn, name: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
    cur = await conn.execute(Q[name], params or {})
    return await cur.fetchone()


async def all_rows(conn: Conn, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = await conn.execute(Q[name], params)
    return await cur.fetchall()


async def notify(conn: Conn, schema: str) -> None:
    """Wake idle workers of this schema when the transaction commits."""
    await conn.execute(Q["notify_work"], {"schema": schema})


async def check_fence(conn: Conn, fence: Fence) -> None:
    """Raise `StaleLease` unless `fence` holds; if it does, the run row stays
    locked until commit, so nothing can take the run over in between."""
    if await one(conn, "fence", fence_params(fence)) is None:
        raise errors.StaleLease(
            f"worker {fence.worker_id} no longer holds run {fence.run_id} at epoch "
            f"{fence.epoch}: it was taken over or cancelled; the write was rejected"
        )


async def insert(
    conn: Conn, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
) -> None:
    if records:
        async with conn.cursor() as cur:
            await cur.executemany(
                Q["insert_record"], [record_params(fence.run_id, r) for r in records]
            )
    if resume is not None:
        await conn.execute(Q["insert_resume"], dataclasses.asdict(resume))


async def landed(
    conn: Conn, run_id: str, records: Sequence[Record], resume: ResumeRecord | None = None,
) -> bool | None:
    """Whether a write of `records` (or, with none, of `resume`) is stored:
    the read-back after a commit nobody acknowledged. None if neither tells."""
    if records:
        row = await one(conn, "count_records", {
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
        return await one(conn, "has_resume", {"run_id": run_id, "epoch": resume.epoch}) is not None
    return None
