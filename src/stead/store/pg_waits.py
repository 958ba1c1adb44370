"""Waits, events and task state on PostgreSQL: the part of `PostgresStore`
that issue 4 added to the `Store` interface, with SQLite's semantics.

Everything that touches a run's waits locks the run row first (a fenced write
through its fence, a delivery or a revocation explicitly), so a delivery, a
suspension and a revocation of one run happen one at a time, as they do under
SQLite's single writer. Compare-and-set on task state is serialised per task
key by an advisory lock, which also covers a key that has no row yet.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Sequence
from typing import Any

from stead import errors
from stead.clock import Clock
from stead.records import (
    DeliveryContext,
    EventRow,
    Fence,
    Judgement,
    Record,
    ResumeRecord,
    StateRow,
    WaitRow,
)
from stead.store import pg_connection, pg_ops
from stead.store.base import Judge, StateChange
from stead.store.pg_connection import NOT_LANDED, Conn, NotLanded
from stead.store.pg_ops import FencedWrite, Q, all_rows, one

_WAIT_INSERT = tuple(
    f.name for f in dataclasses.fields(WaitRow) if f.name not in ("state", "event_id", "closed_at")
)


class PgWaits:
    """Mixed into `PostgresStore`; uses its connector, clock and schema."""

    _db: pg_connection.Connector
    clock: Clock
    target: pg_connection.Target

    async def _notify(self, conn: Conn) -> None:
        await pg_ops.notify(conn, self.target.schema)

    async def _wait_state(self, conn: Conn, wait_id: str) -> str:
        row = await one(conn, "get_wait", {"wait_id": wait_id})
        return "missing" if row is None else str(row["state"])

    # -- waits ----------------------------------------------------------------
    async def open_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait: WaitRow,
    ) -> None:
        async def op(conn: Conn) -> None:
            await pg_ops.fenced_write(conn, FencedWrite(fence, records, resume))
            await conn.execute(Q["insert_wait"], {f: getattr(wait, f) for f in _WAIT_INSERT})

        async def verify(conn: Conn) -> NotLanded | None:
            found = await one(conn, "get_wait", {"wait_id": wait.wait_id})
            return None if found is not None else NOT_LANDED

        await self._db.write(op, verify=verify)

    async def get_wait(self, wait_id: str) -> WaitRow | None:
        async def op(conn: Conn) -> WaitRow | None:
            row = await one(conn, "get_wait", {"wait_id": wait_id})
            return None if row is None else pg_ops.wait_row(row)

        return await self._db.read(op)

    async def list_waits(
        self, *, run_id: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[WaitRow]:
        async def op(conn: Conn) -> list[WaitRow]:
            rows = await all_rows(conn, "list_waits",
                                  {"run_id": run_id, "state": state, "limit": limit})
            return [pg_ops.wait_row(r) for r in rows]

        return await self._db.read(op)

    async def close_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait_id: str, state: str,
    ) -> None:
        async def op(conn: Conn) -> None:
            await pg_ops.fenced_write(conn, FencedWrite(fence, records, resume))
            closed = await one(conn, "close_wait", {
                "wait_id": wait_id, "state": state, "now": self.clock.now(),
            })
            if closed is None:  # raising rolls the records back too
                raise errors.WaitNotOpen(wait_id, await self._wait_state(conn, wait_id))

        async def verify(conn: Conn) -> NotLanded | None:
            done = await pg_ops.landed(conn, fence.run_id, records, resume)
            if done is None:
                done = await self._wait_state(conn, wait_id) == state
            return None if done else NOT_LANDED

        await self._db.write(op, verify=verify)

    async def suspend(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wake_at: float | None, wait_ids: Sequence[str],
    ) -> None:
        async def op(conn: Conn) -> None:
            await pg_ops.fenced_write(conn, FencedWrite(fence, records, resume))
            for wait_id in wait_ids:
                state = await self._wait_state(conn, wait_id)
                if state != "open":  # raising rolls the records back too
                    raise errors.WaitNotOpen(wait_id, state)
            now = self.clock.now()
            await conn.execute(Q["suspend"], {
                **pg_ops.fence_params(fence), "wake_at": wake_at, "now": now,
            })
            if wake_at is not None and wake_at <= now:
                await self._notify(conn)  # due already: claimable at once

        async def verify(conn: Conn) -> NotLanded | None:
            done = await pg_ops.landed(conn, fence.run_id, records, resume)
            if done is None:
                row = await one(conn, "get_run", {"run_id": fence.run_id})
                done = row is not None and (row["status"], row["epoch"]) == (
                    "waiting", fence.epoch
                )
            return None if done else NOT_LANDED

        await self._db.write(op, verify=verify)

    # -- events ---------------------------------------------------------------
    async def deliver(self, event: EventRow, judge: Judge) -> tuple[Judgement, EventRow]:
        last: list[tuple[Judgement, EventRow]] = []

        async def op(conn: Conn) -> tuple[Judgement, EventRow]:
            now = self.clock.now()
            key = {"run_id": event.run_id, "event_id": event.event_id}
            await conn.execute(Q["lock_run"], key)
            found = await one(conn, "get_event", key)
            run = await one(conn, "get_run", key)
            waits = tuple(pg_ops.wait_row(r) for r in await all_rows(conn, "run_waits", key))
            versions: dict[str, int] = {}
            for w in waits:
                state = await one(conn, "read_state", {"task_key": w.task_key})
                versions[w.task_key] = 0 if state is None else int(state["version"])
            ctx = DeliveryContext(
                run=None if run is None else pg_ops.run_row(run), waits=waits,
                state_versions=versions,
                existing=None if found is None else pg_ops.event_row(found), now=now,
            )
            verdict = judge(ctx)
            if verdict.verdict == "duplicate":
                assert ctx.existing is not None
                return verdict, ctx.existing
            stored = dataclasses.replace(
                event, wait_id=verdict.wait_id or event.wait_id, verdict=verdict.verdict,
                reason=verdict.reason, detail=verdict.detail, received_at=now,
            )
            await conn.execute(Q["insert_event"], dataclasses.asdict(stored))
            if verdict.verdict == "accepted" and verdict.wait_id is not None:
                await conn.execute(Q["consume_wait"], {
                    "wait_id": verdict.wait_id, "event_id": event.event_id, "now": now,
                })
                if await one(conn, "wake", {"run_id": event.run_id, "now": now}):
                    await self._notify(conn)
            last[:] = [(verdict, stored)]
            return verdict, stored

        async def verify(conn: Conn) -> tuple[Judgement, EventRow] | NotLanded:
            # Stored means this delivery landed (a duplicate stores nothing).
            found = await one(conn, "get_event",
                              {"run_id": event.run_id, "event_id": event.event_id})
            if found is None or not last:
                return NOT_LANDED
            return last[0][0], pg_ops.event_row(found)

        return await self._db.write(op, verify=verify)

    async def revoke_wait(self, wait_id: str) -> WaitRow:
        async def op(conn: Conn) -> WaitRow:
            now = self.clock.now()
            row = await one(conn, "get_wait", {"wait_id": wait_id})
            if row is None:
                raise errors.SteadError(f"no wait {wait_id!r} in {self.target.display}")
            await conn.execute(Q["lock_run"], {"run_id": row["run_id"]})
            wait = pg_ops.wait_row(await one(conn, "get_wait", {"wait_id": wait_id}) or row)
            if wait.state != "open":
                raise errors.WaitNotOpen(wait_id, wait.state)
            await conn.execute(Q["close_wait"], {"wait_id": wait_id, "state": "revoked",
                                                 "now": now})
            if await one(conn, "wake", {"run_id": wait.run_id, "now": now}):
                await self._notify(conn)
            return wait.evolve(state="revoked", closed_at=now)

        async def verify(conn: Conn) -> WaitRow | NotLanded:
            row = await one(conn, "get_wait", {"wait_id": wait_id})
            if row is None or row["state"] != "revoked":
                return NOT_LANDED
            return pg_ops.wait_row(row)

        return await self._db.write(op, verify=verify)

    async def get_event(self, run_id: str, event_id: str) -> EventRow | None:
        async def op(conn: Conn) -> EventRow | None:
            row = await one(conn, "get_event", {"run_id": run_id, "event_id": event_id})
            return None if row is None else pg_ops.event_row(row)

        return await self._db.read(op)

    async def list_events(self, run_id: str, limit: int = 1000) -> list[EventRow]:
        async def op(conn: Conn) -> list[EventRow]:
            rows = await all_rows(conn, "list_events", {"run_id": run_id, "limit": limit})
            return [pg_ops.event_row(r) for r in rows]

        return await self._db.read(op)

    # -- task state -------------------------------------------------------------
    async def read_state(self, task_key: str) -> StateRow | None:
        async def op(conn: Conn) -> StateRow | None:
            row = await one(conn, "read_state", {"task_key": task_key})
            return None if row is None else pg_ops.state_row(row)

        return await self._db.read(op)

    async def update_state(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        task_key: str, change: StateChange,
    ) -> tuple[StateRow | None, Record]:
        last: list[tuple[StateRow | None, Record]] = []

        async def op(conn: Conn) -> tuple[StateRow | None, Record]:
            await pg_ops.check_fence(conn, fence)
            await conn.execute(Q["lock_state"],
                               {"schema": self.target.schema, "task_key": task_key})
            now = self.clock.now()
            row = await one(conn, "read_state", {"task_key": task_key})
            current = None if row is None else pg_ops.state_row(row)
            data, status, payload = change(current)
            written = records[-1].evolve(status=status, payload=payload)
            result = current
            if data is not None:
                version = (current.version if current else 0) + 1
                params: dict[str, Any] = {"task_key": task_key, "version": version,
                                          "data": data, "run_id": fence.run_id, "now": now}
                await conn.execute(Q["upsert_state"], params)
                await conn.execute(Q["insert_state_history"], params)
                result = StateRow(task_key, version, data, fence.run_id, now)
            await pg_ops.insert(conn, fence, [*records[:-1], written], resume)
            last[:] = [(result, written)]
            return result, written

        async def verify(conn: Conn) -> tuple[StateRow | None, Record] | NotLanded:
            if not last:
                return NOT_LANDED
            result, written = last[0]
            done = await pg_ops.landed(conn, fence.run_id, [*records[:-1], written])
            return (result, written) if done else NOT_LANDED

        return await self._db.write(op, verify=verify)

    # -- settings ---------------------------------------------------------------
    async def secret(self) -> bytes:
        async def read(conn: Conn) -> dict[str, Any] | None:
            return await one(conn, "get_meta", {"key": "secret"})

        row = await self._db.read(read)
        if row is None:
            async def op(conn: Conn) -> dict[str, Any] | None:
                await conn.execute(Q["insert_meta"],
                                   {"key": "secret", "value": secrets.token_hex(32)})
                return await one(conn, "get_meta", {"key": "secret"})

            row = await self._db.write(op)  # twice is once: the first insert wins
        assert row is not None
        return bytes.fromhex(str(row["value"]))
