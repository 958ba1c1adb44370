"""The embedded store: one SQLite file in WAL mode with synchronous commits.

Several worker processes on one machine share the file; SQLite serialises
writers (`BEGIN IMMEDIATE`), so every claim and fenced write is atomic. The
blocking driver runs on one thread per store object, so the event loop never
waits on disk.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from stead import errors
from stead.records import Fence, NewRun, Record, ResumeRecord, RunRow
from stead.store.sqlite_base import (
    _Q,
    _fence,
    _record,
    _record_params,
    _run_row,
    busy_timeout_from_url,
    path_from_url,
)
from stead.store.sqlite_waits import SQLiteWaits

__all__ = ["SQLiteStore", "busy_timeout_from_url", "path_from_url"]


class SQLiteStore(SQLiteWaits):
    """The embedded store (see the module docstring)."""

    # -- runs ---------------------------------------------------------------
    async def create_run(self, new: NewRun) -> tuple[RunRow, bool]:
        def op(conn: sqlite3.Connection) -> tuple[RunRow, bool]:
            with self._write(conn):
                if new.task_id is not None:
                    row = conn.execute(_Q["find_live_task"], {"task_id": new.task_id}).fetchone()
                    if row is not None:
                        return _run_row(row), False
                row = conn.execute(_Q["insert_run"], {
                    "run_id": new.run_id, "workflow": new.workflow, "version": new.version,
                    "task_id": new.task_id, "input": new.input, "now": self.clock.now(),
                }).fetchone()
                return _run_row(row), True

        return await self._call(op)

    async def get_run(self, run_id: str) -> RunRow:
        def op(conn: sqlite3.Connection) -> RunRow:
            row = conn.execute(_Q["get_run"], {"run_id": run_id}).fetchone()
            if row is None:
                raise errors.UnknownRun(f"no run {run_id!r} in {self.url}")
            return _run_row(row)

        return await self._call(op)

    async def list_runs(
        self, *, status: str | None = None, workflow: str | None = None, limit: int = 100
    ) -> list[RunRow]:
        def op(conn: sqlite3.Connection) -> list[RunRow]:
            rows = conn.execute(
                _Q["list_runs"], {"status": status, "workflow": workflow, "limit": limit}
            ).fetchall()
            return [_run_row(r) for r in rows]

        return await self._call(op)

    async def cancel_run(self, run_id: str) -> RunRow:
        def op(conn: sqlite3.Connection) -> RunRow:
            with self._write(conn):
                row = conn.execute(
                    _Q["cancel_run"], {"run_id": run_id, "now": self.clock.now()}
                ).fetchone()
                if row is None:
                    row = conn.execute(_Q["get_run"], {"run_id": run_id}).fetchone()
                    if row is None:
                        raise errors.UnknownRun(f"no run {run_id!r} in {self.url}")
                return _run_row(row)

        return await self._call(op)

    # -- leases -------------------------------------------------------------
    async def claim(
        self, worker_id: str, hosted: Sequence[str], lease_seconds: float, limit: int,
        exclude: Sequence[str] = (),
    ) -> list[RunRow]:
        hosted_json = json.dumps(list(hosted))
        exclude_json = json.dumps(list(exclude))

        def op(conn: sqlite3.Connection) -> list[RunRow]:
            now = self.clock.now()
            params = {"worker_id": worker_id, "expires": now + lease_seconds, "now": now,
                      "hosted": hosted_json, "exclude": exclude_json, "limit": limit}
            # An idle worker's poll is a read: it takes the write lock (and costs a
            # commit) only when there is something to claim.
            if conn.execute(_Q["claim_candidates"], params).fetchone() is None:
                return []
            with self._write(conn):
                ids = [r[0] for r in conn.execute(_Q["claim_candidates"], params)]
                rows = conn.execute(_Q["claim"], {**params, "run_ids": json.dumps(ids)})
                taken = [_run_row(r) for r in rows]
            return sorted(taken, key=lambda r: r.created_at)

        return await self._call(op)

    async def renew(self, fences: Sequence[Fence], lease_seconds: float) -> list[Fence]:
        def op(conn: sqlite3.Connection) -> list[Fence]:
            lost = []
            expires = self.clock.now() + lease_seconds
            with self._write(conn):
                for f in fences:
                    cur = conn.execute(_Q["renew"], {
                        "run_id": f.run_id, "epoch": f.epoch, "worker_id": f.worker_id,
                        "expires": expires,
                    })
                    if cur.rowcount == 0:
                        lost.append(f)
            return lost

        return await self._call(op)

    async def release(self, fence: Fence) -> None:
        self._done_writing(fence.run_id)

        def op(conn: sqlite3.Connection) -> None:
            with self._write(conn):
                conn.execute(_Q["release"], {**_fence(fence), "now": self.clock.now()})

        await self._call(op)

    # -- journal ------------------------------------------------------------
    async def load_journal(self, run_id: str) -> list[Record]:
        def op(conn: sqlite3.Connection) -> list[Record]:
            rows = conn.execute(_Q["load_journal"], {"run_id": run_id}).fetchall()
            return [_record(r) for r in rows]

        return await self._call(op)

    async def append(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None = None
    ) -> None:
        # Appends waiting at the same time share one commit (sqlite_group).
        await self._appends.append(fence, records, resume)

    async def finish(
        self,
        fence: Fence,
        status: str,
        *,
        result: str | None = None,
        error: str | None = None,
        records: Sequence[Record] = (),
        resume: ResumeRecord | None = None,
    ) -> None:
        def then(conn: sqlite3.Connection) -> None:
            conn.execute(_Q["finish"], {
                **_fence(fence), "status": status, "result": result, "error": error,
                "now": self.clock.now(),
            })

        try:  # in a group commit with other runs' appends, like an append
            await self._appends.append(fence, records, resume, then)
        finally:
            self._done_writing(fence.run_id)

    async def resume_stopped(
        self, run_id: str, expect_status: str, record: Record | None
    ) -> RunRow:
        def op(conn: sqlite3.Connection) -> RunRow:
            with self._write(conn):
                now = self.clock.now()
                row = conn.execute(_Q["resume_stopped"], {
                    "run_id": run_id, "expect": expect_status, "now": now,
                }).fetchone()
                if row is None:
                    current = conn.execute(_Q["get_run"], {"run_id": run_id}).fetchone()
                    if current is None:
                        raise errors.UnknownRun(f"no run {run_id!r} in {self.url}")
                    raise errors.NotStopped(
                        f"run {run_id} is {current['status']}, not {expect_status}: "
                        "nothing to decide (was it decided already?)"
                    )
                run = _run_row(row)
                if record is None:
                    return run
                seq = conn.execute(_Q["next_seq"], {"run_id": run_id}).fetchone()[0]
                rec = record.evolve(seq=seq, epoch=run.epoch, at=now)
                conn.execute(_Q["insert_record"], _record_params(run_id, rec))
                return run

        return await self._call(op)

    async def list_resumes(self, run_id: str) -> list[ResumeRecord]:
        def op(conn: sqlite3.Connection) -> list[ResumeRecord]:
            rows = conn.execute(_Q["list_resumes"], {"run_id": run_id}).fetchall()
            return [
                ResumeRecord(
                    run_id=r["run_id"], epoch=r["epoch"], worker_id=r["worker_id"],
                    at=r["at"], from_seq=r["from_seq"], code_version=r["code_version"],
                    reused=r["reused"], detail=r["detail"],
                )
                for r in rows
            ]

        return await self._call(op)
