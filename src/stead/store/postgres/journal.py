"""Journal writes on PostgreSQL, as single statements (see `sql/queries.sql`).

Records travel as one JSON parameter (`json_to_recordset` on the server):
however many there are, the statement stays the same, and building it costs
one `json.dumps` instead of a parameter per field of every record."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stead.records import Fence, Record, ResumeRecord
from stead.store import sql_files
from stead.store.postgres.connection import Conn
from stead.store.seam import FencedWrite, Journal, fence_params, stale

Q = sql_files.queries("postgres")


def _record_row(r: Record) -> dict[str, Any]:
    return {"seq": r.seq, "addr": r.addr, "attempt": r.attempt, "kind": r.kind, "name": r.name,
            "digest": r.digest, "status": r.status, "payload": r.payload, "epoch": r.epoch,
            "at": r.at, "arguments": r.arguments}


def _resume_row(r: ResumeRecord) -> dict[str, Any]:
    return {"epoch": r.epoch, "worker_id": r.worker_id, "at": r.at, "from_seq": r.from_seq,
            "code_version": r.code_version, "reused": r.reused, "detail": r.detail}


def _to_json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, ensure_ascii=False)


def fenced_query(writes: Sequence[FencedWrite]) -> tuple[str, dict[str, Any]]:
    """The statement (its name in queries.sql) and parameters that make
    `writes` in one go: `fenced_write` (`append_one` and `finish_one` for a
    lone write of one record or none). Jobs are numbered from 1 in the order
    given, which is the order their runs are locked in. Each row it returns
    (n) is a job whose fence held."""
    if len(writes) == 1:
        w = writes[0]
        if w.resume is None and len(w.records) == 1 and w.finish is None:
            r = w.records[0]
            return "append_one", {
                **fence_params(w.fence), "seq": r.seq, "addr": r.addr, "attempt": r.attempt,
                "kind": r.kind, "name": r.name, "digest": r.digest, "status": r.status,
                "payload": r.payload, "record_epoch": r.epoch, "at": r.at,
                "arguments": r.arguments,
            }
        if w.resume is None and not w.records and w.finish is not None:
            end = w.finish
            return "finish_one", {**fence_params(w.fence), "status": end.status,
                                  "result": end.result, "error": end.error, "now": end.now}
    jobs: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    resumes: list[dict[str, Any]] = []
    finishes: list[dict[str, Any]] = []
    for n, w in enumerate(writes, 1):
        f = w.fence
        jobs.append({"n": n, "run_id": f.run_id, "epoch": f.epoch, "worker_id": f.worker_id})
        for r in w.records:
            row = _record_row(r)
            row["n"] = n
            records.append(row)
        if w.resume is not None:
            row = _resume_row(w.resume)
            row["n"] = n
            resumes.append(row)
        if w.finish is not None:
            end = w.finish
            finishes.append({"n": n, "status": end.status, "result": end.result,
                             "error": end.error, "now": end.now})
    return "fenced_write", {"jobs": _to_json(jobs), "records": _to_json(records),
                            "resumes": _to_json(resumes), "finishes": _to_json(finishes)}


async def write_fenced(conn: Conn, write: FencedWrite) -> None:
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
            "run_id": fence.run_id, "records": _to_json([_record_row(r) for r in records]),
            "resumes": _to_json([] if resume is None else [_resume_row(resume)]),
        })


async def apply(conn: Conn, step: Journal) -> None:
    """A flow's journal step."""
    write = step.write
    if step.checked:
        await insert(conn, write.fence, write.records, write.resume)
    else:
        await write_fenced(conn, write)
