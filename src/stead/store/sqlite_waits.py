"""Waits, events and task state on SQLite. SQLite has one writer at a time
(`BEGIN IMMEDIATE`), so a delivery, a suspension and a revocation of a run are
serialised by the database itself."""

from __future__ import annotations

import dataclasses
import secrets
import sqlite3
from collections.abc import Sequence

from stead import errors
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
from stead.store.base import Judge, StateChange
from stead.store.sqlite_base import (
    _Q,
    SQLiteBase,
    _event_row,
    _fence,
    _run_row,
    _state_row,
    _wait_row,
)


class SQLiteWaits(SQLiteBase):
    # -- waits and events -----------------------------------------------------
    async def open_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait: WaitRow,
    ) -> None:
        def op(conn: sqlite3.Connection) -> None:
            with self._write(conn):
                self._check_fence(conn, fence)
                self._insert(conn, fence, records, resume)
                params = {f: getattr(wait, f) for f in WaitRow.__dataclass_fields__}
                del params["state"], params["event_id"], params["closed_at"]
                conn.execute(_Q["insert_wait"], params)

        await self._call(op)

    async def get_wait(self, wait_id: str) -> WaitRow | None:
        def op(conn: sqlite3.Connection) -> WaitRow | None:
            row = conn.execute(_Q["get_wait"], {"wait_id": wait_id}).fetchone()
            return None if row is None else _wait_row(row)

        return await self._call(op)

    async def list_waits(
        self, *, run_id: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[WaitRow]:
        def op(conn: sqlite3.Connection) -> list[WaitRow]:
            rows = conn.execute(
                _Q["list_waits"], {"run_id": run_id, "state": state, "limit": limit}
            ).fetchall()
            return [_wait_row(r) for r in rows]

        return await self._call(op)

    async def close_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait_id: str, state: str,
    ) -> None:
        def op(conn: sqlite3.Connection) -> None:
            with self._write(conn):
                self._check_fence(conn, fence)
                cur = conn.execute(_Q["close_wait"], {
                    "wait_id": wait_id, "state": state, "now": self.clock.now(),
                })
                if cur.rowcount == 0:
                    raise errors.WaitNotOpen(wait_id, self._wait_state(conn, wait_id))
                self._insert(conn, fence, records, resume)

        await self._call(op)

    async def suspend(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wake_at: float | None, wait_ids: Sequence[str],
    ) -> None:
        def op(conn: sqlite3.Connection) -> None:
            with self._write(conn):
                self._check_fence(conn, fence)
                for wait_id in wait_ids:
                    state = self._wait_state(conn, wait_id)
                    if state != "open":
                        raise errors.WaitNotOpen(wait_id, state)
                self._insert(conn, fence, records, resume)
                conn.execute(_Q["suspend"], {
                    **_fence(fence), "wake_at": wake_at, "now": self.clock.now(),
                })

        self._done_writing(fence.run_id)
        await self._call(op)

    async def deliver(self, event: EventRow, judge: Judge) -> tuple[Judgement, EventRow]:
        def op(conn: sqlite3.Connection) -> tuple[Judgement, EventRow]:
            with self._write(conn):
                now = self.clock.now()
                key = {"run_id": event.run_id, "event_id": event.event_id}
                found = conn.execute(_Q["get_event"], key).fetchone()
                run = conn.execute(_Q["get_run"], {"run_id": event.run_id}).fetchone()
                waits = tuple(_wait_row(r) for r in conn.execute(
                    _Q["run_waits"], {"run_id": event.run_id}).fetchall())
                versions = {}
                for w in waits:
                    state = conn.execute(_Q["read_state"], {"task_key": w.task_key}).fetchone()
                    versions[w.task_key] = 0 if state is None else int(state["version"])
                ctx = DeliveryContext(
                    run=None if run is None else _run_row(run), waits=waits,
                    state_versions=versions,
                    existing=None if found is None else _event_row(found), now=now,
                )
                verdict = judge(ctx)
                if verdict.verdict == "duplicate":
                    assert ctx.existing is not None
                    return verdict, ctx.existing
                stored = dataclasses.replace(
                    event, wait_id=verdict.wait_id or event.wait_id, verdict=verdict.verdict,
                    reason=verdict.reason, detail=verdict.detail, received_at=now,
                )
                conn.execute(_Q["insert_event"], dataclasses.asdict(stored))
                if verdict.verdict == "accepted" and verdict.wait_id is not None:
                    conn.execute(_Q["consume_wait"], {
                        "wait_id": verdict.wait_id, "event_id": event.event_id, "now": now,
                    })
                    conn.execute(_Q["wake"], {"run_id": event.run_id, "now": now})
                return verdict, stored

        return await self._call(op)

    async def revoke_wait(self, wait_id: str) -> WaitRow:
        def op(conn: sqlite3.Connection) -> WaitRow:
            with self._write(conn):
                now = self.clock.now()
                row = conn.execute(_Q["get_wait"], {"wait_id": wait_id}).fetchone()
                if row is None:
                    raise errors.SteadError(f"no wait {wait_id!r} in {self.url}")
                wait = _wait_row(row)
                if wait.state != "open":
                    raise errors.WaitNotOpen(wait_id, wait.state)
                conn.execute(_Q["close_wait"], {"wait_id": wait_id, "state": "revoked",
                                                "now": now})
                conn.execute(_Q["wake"], {"run_id": wait.run_id, "now": now})
                return wait.evolve(state="revoked", closed_at=now)

        return await self._call(op)

    async def get_event(self, run_id: str, event_id: str) -> EventRow | None:
        def op(conn: sqlite3.Connection) -> EventRow | None:
            row = conn.execute(
                _Q["get_event"], {"run_id": run_id, "event_id": event_id}
            ).fetchone()
            return None if row is None else _event_row(row)

        return await self._call(op)

    async def list_events(self, run_id: str, limit: int = 1000) -> list[EventRow]:
        def op(conn: sqlite3.Connection) -> list[EventRow]:
            rows = conn.execute(_Q["list_events"], {"run_id": run_id, "limit": limit})
            return [_event_row(r) for r in rows.fetchall()]

        return await self._call(op)

    # -- task state ---------------------------------------------------------
    async def read_state(self, task_key: str) -> StateRow | None:
        def op(conn: sqlite3.Connection) -> StateRow | None:
            row = conn.execute(_Q["read_state"], {"task_key": task_key}).fetchone()
            return None if row is None else _state_row(row)

        return await self._call(op)

    async def update_state(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        task_key: str, change: StateChange,
    ) -> tuple[StateRow | None, Record]:
        def op(conn: sqlite3.Connection) -> tuple[StateRow | None, Record]:
            with self._write(conn):
                self._check_fence(conn, fence)
                now = self.clock.now()
                row = conn.execute(_Q["read_state"], {"task_key": task_key}).fetchone()
                current = None if row is None else _state_row(row)
                data, status, payload = change(current)
                last = records[-1].evolve(status=status, payload=payload)
                result = current
                if data is not None:
                    version = (current.version if current else 0) + 1
                    params = {"task_key": task_key, "version": version, "data": data,
                              "run_id": fence.run_id, "now": now}
                    conn.execute(_Q["upsert_state"], params)
                    conn.execute(_Q["insert_state_history"], params)
                    result = StateRow(task_key, version, data, fence.run_id, now)
                self._insert(conn, fence, [*records[:-1], last], resume)
                return result, last

        return await self._call(op)

    async def secret(self) -> bytes:
        def op(conn: sqlite3.Connection) -> bytes:
            row = conn.execute(_Q["get_meta"], {"key": "secret"}).fetchone()
            if row is None:
                with self._write(conn):
                    conn.execute(_Q["insert_meta"],
                                 {"key": "secret", "value": secrets.token_hex(32)})
                    row = conn.execute(_Q["get_meta"], {"key": "secret"}).fetchone()
            return bytes.fromhex(row["value"])

        return await self._call(op)
