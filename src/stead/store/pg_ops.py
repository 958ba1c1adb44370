"""What the PostgreSQL store's writes share: row conversions, the fence, the
journal inserts, the read-backs that settle an unacknowledged commit, and
NOTIFY. Each takes the connection of the transaction it is part of.

Records travel as one JSON parameter (`json_to_recordset` on the server):
however many there are, the statement stays the same, and building it costs
one `json.dumps` instead of a parameter per field of every record."""

from __future__ import annotations

import dataclasses
import json
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
    return {"run_id": run_id, **record_row(r)}


def record_row(r: Record) -> dict[str, Any]:
    return {"seq": r.seq, "addr": r.addr, "attempt": r.attempt, "kind": r.kind, "name": r.name,
            "digest": r.digest, "status": r.status, "payload": r.payload, "epoch": r.epoch,
            "at": r.at}


def resume_row(r: ResumeRecord) -> dict[str, Any]:
    return {"epoch": r.epoch, "worker_id": r.worker_id, "at": r.at, "from_seq": r.from_seq,
            "code_version": r.code_version, "reused": r.reused, "detail": r.detail}


def to_json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, ensure_ascii=False)


@dataclasses.dataclass(frozen=True, slots=True)
class FencedWrite:
    """One fenced write of the journal: `records` and the takeover's `resume`
    record under `fence`; with `finish` ({status, result, error, now}) it also
    ends the run's attempt."""

    fence: Fence
    records: Sequence[Record]
    resume: ResumeRecord | None = None
    finish: dict[str, Any] | None = None


def fenced_query(writes: Sequence[FencedWrite]) -> tuple[str, dict[str, Any]]:
    """The statement (its name in queries.sql) and parameters that make
    `writes` in one go: `fenced_write` (`append_one` and `finish_one` for a
    lone write of one record or none). Jobs are numbered from 1 in the order given, which is
    the order their runs are locked in. Each row it returns (n) is a job whose
    fence held."""
    if len(writes) == 1:
        w = writes[0]
        if w.resume is None and len(w.records) == 1 and w.finish is None:
            r = w.records[0]
            return "append_one", {
                **fence_params(w.fence), "seq": r.seq, "addr": r.addr, "attempt": r.attempt,
                "kind": r.kind, "name": r.name, "digest": r.digest, "status": r.status,
                "payload": r.payload, "record_epoch": r.epoch, "at": r.at,
            }
        if w.resume is None and not w.records and w.finish is not None:
            return "finish_one", {**fence_params(w.fence), **w.finish}
    jobs: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    resumes: list[dict[str, Any]] = []
    finishes: list[dict[str, Any]] = []
    for n, w in enumerate(writes, 1):
        f = w.fence
        jobs.append({"n": n, "run_id": f.run_id, "epoch": f.epoch, "worker_id": f.worker_id})
        for r in w.records:
            row = record_row(r)
            row["n"] = n
            records.append(row)
        if w.resume is not None:
            row = resume_row(w.resume)
            row["n"] = n
            resumes.append(row)
        if w.finish is not None:
            finishes.append({"n": n, **w.finish})
    return "fenced_write", {"jobs": to_json(jobs), "records": to_json(records),
                            "resumes": to_json(resumes), "finishes": to_json(finishes)}


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


def stale(fence: Fence) -> errors.StaleLease:
    return errors.StaleLease(
        f"worker {fence.worker_id} no longer holds run {fence.run_id} at epoch "
        f"{fence.epoch}: it was taken over or cancelled; the write was rejected"
    )


async def check_fence(conn: Conn, fence: Fence) -> None:
    """Raise `StaleLease` unless `fence` holds; if it does, the run row stays
    locked until commit, so nothing can take the run over in between."""
    if await one(conn, "fence", fence_params(fence)) is None:
        raise stale(fence)


async def fenced_write(conn: Conn, write: FencedWrite) -> None:
    """Make `write` in one statement (the fence and the inserts together);
    raise `StaleLease`, having written nothing, unless its fence holds. In a
    transaction the run row stays locked until the commit."""
    name, params = fenced_query([write])
    cur = await conn.execute(Q[name], params)
    if not await cur.fetchall():
        raise stale(write.fence)


async def insert(
    conn: Conn, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
) -> None:
    """Insert `records` and `resume` in a transaction that checked `fence`."""
    if records or resume is not None:
        await conn.execute(Q["insert_records"], {
            "run_id": fence.run_id, "records": to_json([record_row(r) for r in records]),
            "resumes": to_json([] if resume is None else [resume_row(resume)]),
        })


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
