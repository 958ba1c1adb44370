"""The PostgreSQL store, for workers on many machines sharing one database.

`postgresql://user@host:5432/db?schema=NAME` (schema optional, default
`public`; two apps in two schemas of one database never see each other's
runs). psycopg 3 with a connection pool; every state change is one
transaction with the same semantics as the SQLite store:

- claims are one `UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED)`, so
  concurrent claimers never wait on, nor share, a run;
- a fenced write locks its run row (`FOR NO KEY UPDATE`) while it checks the
  epoch, so no claim or cancel can slip in between the check and the commit;
- journal appends and finishes are one statement each (fence, inserts and
  commit in one round trip), and concurrent ones share it (`pg_group`);
- a write that makes a run claimable sends `NOTIFY stead_work` in its
  transaction; idle workers `LISTEN` and wake in milliseconds (`wait_for_work`),
  with polling as the fallback.

Connection faults and unacknowledged commits are handled in `pg_connection`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stead import errors
from stead.clock import Clock
from stead.records import Fence, NewRun, Record, ResumeRecord, RunRow
from stead.store import pg_connection, pg_group, pg_ops, sql_files
from stead.store.base import Store
from stead.store.pg_connection import NOT_LANDED, Conn, NotLanded
from stead.store.pg_ops import FencedWrite, Q, all_rows, fence_params, one, record_params, run_row
from stead.store.pg_waits import PgWaits


class PostgresStore(PgWaits, Store):
    def __init__(self, url: str, *, clock: Clock, retry_for: float = 30.0) -> None:
        self.url = url
        self.clock = clock
        self.target = pg_connection.parse_url(url)
        self._db = pg_connection.Connector(self.target, retry_for=retry_for)
        self._listener = pg_connection.Listener(self._db)
        self._group = pg_group.GroupCommit(self._db)

    @property
    def commits(self) -> int:
        return self._db.commits

    @property
    def schema(self) -> str:
        return self.target.schema

    # -- plumbing -----------------------------------------------------------
    async def open(self) -> None:
        await self._db.open(self._migrate)

    async def _migrate(self, conn: Conn) -> None:
        """Create the schema and apply every newer migration, under a lock held
        by one opener at a time, so many processes may start at once."""
        schema = {"schema": self.schema}
        async with conn.transaction():
            await conn.execute(Q["migrate_lock"], schema)
            await conn.execute(Q["name_schema"], schema)
            await conn.execute(Q["create_schema"])
            await conn.execute(Q["create_version_table"])
            row = await one(conn, "schema_version", {})
            current = int(row["version"]) if row else 0
            for version, script in sql_files.migrations("postgres"):
                if version > current:
                    await conn.execute(script.encode())
                    await conn.execute(Q["insert_version"], {"version": version})

    async def close(self) -> None:
        await self._group.close()
        await self._listener.close()
        await self._db.close()

    async def wait_for_work(self, timeout: float) -> None:
        """Return when a run may have become claimable (NOTIFY), or after `timeout`."""
        await self._listener.wait(timeout)

    def _unknown(self, run_id: str) -> errors.UnknownRun:
        return errors.UnknownRun(f"no run {run_id!r} in {self.target.display}")

    # -- runs ---------------------------------------------------------------
    async def create_run(self, new: NewRun) -> tuple[RunRow, bool]:
        async def op(conn: Conn) -> tuple[RunRow, bool]:
            for _ in range(3):
                if new.task_id is not None:
                    row = await one(conn, "find_live_task", {"task_id": new.task_id})
                    if row is not None:
                        return run_row(row), False
                row = await one(conn, "insert_run", {
                    "run_id": new.run_id, "workflow": new.workflow, "version": new.version,
                    "task_id": new.task_id, "input": new.input, "now": self.clock.now(),
                    "schema": self.schema,
                })
                if row is not None:
                    return run_row(row), True
                if new.task_id is None:
                    break
                # A concurrent start of this task won the insert: read its run.
            raise errors.StoreError(
                f"could not create run {new.run_id} (task {new.task_id!r}): it conflicts "
                "with another run that is not live; try again"
            )

        async def verify(conn: Conn) -> tuple[RunRow, bool] | NotLanded:
            row = await one(conn, "get_run", {"run_id": new.run_id})
            return NOT_LANDED if row is None else (run_row(row), True)

        return await self._db.write(op, verify=verify, autocommit=True)

    async def get_run(self, run_id: str) -> RunRow:
        async def op(conn: Conn) -> RunRow:
            row = await one(conn, "get_run", {"run_id": run_id})
            if row is None:
                raise self._unknown(run_id)
            return run_row(row)

        return await self._db.read(op)

    async def list_runs(
        self, *, status: str | None = None, workflow: str | None = None, limit: int = 100
    ) -> list[RunRow]:
        async def op(conn: Conn) -> list[RunRow]:
            rows = await all_rows(conn, "list_runs",
                              {"status": status, "workflow": workflow, "limit": limit})
            return [run_row(r) for r in rows]

        return await self._db.read(op)

    async def cancel_run(self, run_id: str) -> RunRow:
        async def op(conn: Conn) -> RunRow:
            row = await one(conn, "cancel_run", {"run_id": run_id, "now": self.clock.now()})
            if row is None:
                row = await one(conn, "get_run", {"run_id": run_id})
                if row is None:
                    raise self._unknown(run_id)
            return run_row(row)

        # Twice is once: the second finds it cancelled.
        return await self._db.write(op, autocommit=True)

    # -- leases -------------------------------------------------------------
    async def claim(
        self, worker_id: str, hosted: Sequence[str], lease_seconds: float, limit: int,
        exclude: Sequence[str] = (),
    ) -> list[RunRow]:
        params: dict[str, Any] = {
            "worker_id": worker_id, "hosted": list(hosted), "exclude": list(exclude),
            "limit": limit,
        }

        async def op(conn: Conn) -> list[RunRow]:
            now = self.clock.now()
            params.update(now=now, expires=now + lease_seconds)
            return [run_row(r) for r in await all_rows(conn, "claim", params)]

        async def verify(conn: Conn) -> list[RunRow]:
            # The runs this very claim leased (its lease end and time are its own);
            # none means it did not land, and claiming nothing is a fine answer.
            return [run_row(r) for r in await all_rows(conn, "claimed_by", params)]

        return await self._db.write(op, verify=verify, autocommit=True)

    async def renew(self, fences: Sequence[Fence], lease_seconds: float) -> list[Fence]:
        async def op(conn: Conn) -> list[Fence]:
            rows = await all_rows(conn, "renew", {
                "expires": self.clock.now() + lease_seconds,
                "run_ids": [f.run_id for f in fences], "epochs": [f.epoch for f in fences],
                "workers": [f.worker_id for f in fences],
            })
            held = {(r["run_id"], r["epoch"], r["lease_owner"]) for r in rows}
            return [f for f in fences if (f.run_id, f.epoch, f.worker_id) not in held]

        return await self._db.write(op, autocommit=True)  # renewing twice is renewing

    async def release(self, fence: Fence) -> None:
        async def op(conn: Conn) -> None:
            await conn.execute(Q["release"], {
                **fence_params(fence), "now": self.clock.now(), "schema": self.schema,
            })

        await self._db.write(op, autocommit=True)  # a second release is a no-op

    # -- journal ------------------------------------------------------------
    async def load_journal(self, run_id: str) -> list[Record]:
        async def op(conn: Conn) -> list[Record]:
            rows = await all_rows(conn, "load_journal", {"run_id": run_id})
            return [pg_ops.row_to(Record, r) for r in rows]

        return await self._db.read(op)

    async def append(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None = None
    ) -> None:
        async def verify(conn: Conn) -> NotLanded | None:
            landed = await pg_ops.landed(conn, fence.run_id, records, resume)
            return None if landed else NOT_LANDED

        await self._group.write(FencedWrite(fence, records, resume), verify)

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
        end = {"status": status, "result": result, "error": error, "now": self.clock.now()}

        async def verify(conn: Conn) -> NotLanded | None:
            if records:
                done = await pg_ops.landed(conn, fence.run_id, records)
                return None if done else NOT_LANDED
            row = await one(conn, "get_run", {"run_id": fence.run_id})
            ended = row is not None and (row["status"], row["epoch"], row["lease_owner"]) == (
                status, fence.epoch, None
            )
            return None if ended else NOT_LANDED

        await self._group.write(FencedWrite(fence, records, resume, end), verify)

    async def resume_stopped(
        self, run_id: str, expect_status: str, record: Record | None
    ) -> RunRow:
        async def op(conn: Conn) -> RunRow:
            now = self.clock.now()
            row = await one(conn, "resume_stopped",
                             {"run_id": run_id, "expect": expect_status, "now": now})
            if row is None:
                current = await one(conn, "get_run", {"run_id": run_id})
                if current is None:
                    raise self._unknown(run_id)
                raise errors.NotStopped(
                    f"run {run_id} is {current['status']}, not {expect_status}: "
                    "nothing to decide (was it decided already?)"
                )
            run = run_row(row)
            if record is None:
                await self._notify(conn)
                return run
            seq_row = await one(conn, "next_seq", {"run_id": run_id})
            seq = int(seq_row["seq"]) if seq_row else 0
            rec = record.evolve(seq=seq, epoch=run.epoch, at=now)
            await conn.execute(Q["insert_record"], record_params(run_id, rec))
            await self._notify(conn)
            return run

        async def verify(conn: Conn) -> RunRow | NotLanded:
            if record is None:  # landed if the run left the stopped status
                now_row = await one(conn, "get_run", {"run_id": run_id})
                if now_row is None or now_row["status"] == expect_status:
                    return NOT_LANDED
                return run_row(now_row)
            found = await one(conn, "find_record", {
                "run_id": run_id, "addr": record.addr, "attempt": record.attempt,
                "status": record.status,
            })
            row = await one(conn, "get_run", {"run_id": run_id})
            return NOT_LANDED if found is None or row is None else run_row(row)

        return await self._db.write(op, verify=verify)

    async def list_resumes(self, run_id: str) -> list[ResumeRecord]:
        async def op(conn: Conn) -> list[ResumeRecord]:
            rows = await all_rows(conn, "list_resumes", {"run_id": run_id})
            return [pg_ops.row_to(ResumeRecord, r) for r in rows]

        return await self._db.read(op)
