"""Waits and the events delivered to them."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead.payloads.envelope import What
from stead.store import _large, _rows, local_work
from stead.store.base.part import StorePart
from stead.store.seam import FencedWrite, Flow, Writing
from stead.store.transactions import common
from stead.store.transactions import waits as tx

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.payloads.references import Reference
    from stead.records import EventRow, Fence, Judgement, Record, ResumeRecord, WaitRow, WaitState


class Waits(StorePart):
    """The `Store`'s operations on waits and the events delivered to them."""

    async def open_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait: WaitRow,
    ) -> None:
        """Journal `records` and create `wait` (state open) in one fenced transaction."""
        write = FencedWrite(fence, records, resume)
        await self.database.write(
            lambda: tx.open_wait(write, wait),
            Writing(landed=lambda _: tx.wait_opened(wait.wait_id), pipelined=True),
        )

    async def get_wait(self, wait_id: str) -> WaitRow | None:
        return await self.database.read(
            lambda: common.read_one("get_wait", {"wait_id": wait_id}, _rows.wait))

    async def wait_and_event(self, wait_id: str, *, run_id: str | None = None,
                             ) -> tuple[WaitRow, EventRow | None] | None:
        """The wait `wait_id` and the event that consumed it (None while none
        has), in one read; None if there is no such wait (of run `run_id`,
        when given: naming the run lets PostgreSQL read one day's events)."""
        return await self.database.read(lambda: tx.wait_and_event(wait_id, run_id))

    async def list_waits(
        self, *, run_id: str | None = None, state: str | None = None, limit: int = 100,
        tenant: str | None = None,
    ) -> list[WaitRow]:
        """Waits, oldest first: of `run_id`, in `state`, of `tenant`'s runs
        (each given that is not None)."""
        query = "list_waits" if run_id is None else "list_run_waits"
        return await self.database.read(lambda: common.read_all(
            query, {"run_id": run_id, "state": state, "limit": limit, "tenant": tenant},
            _rows.wait))

    async def close_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait_id: str, state: WaitState,
    ) -> None:
        """Move an open wait to `state` (expired, revoked) and journal `records`, in
        one fenced transaction. Raises `WaitNotOpen` (writing nothing) if the wait
        was consumed or closed meanwhile."""
        write = FencedWrite(fence, records, resume)
        await self.database.write(
            lambda: tx.close_wait(write, wait_id, state, self.clock.now()),
            Writing(landed=lambda _: tx.wait_closed(write, wait_id, state), pipelined=True),
        )

    async def suspend(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wake_at: float | None, wait_ids: Sequence[str], children: Sequence[str] = (),
    ) -> None:
        """Journal `records`, release the lease and park the run as waiting until
        an event, one of its `children` ends, or `wake_at`. Raises `WaitNotOpen`
        (writing nothing) if one of `wait_ids` is no longer open: an event
        arrived, do not sleep; `ChildEnded` if one of `children` ended;
        `CancelRequested` if someone asked to cancel the run."""
        write = FencedWrite(fence, records, resume)
        await self.database.write(
            lambda: tx.suspend(write, wake_at, wait_ids, self.clock.now(), children),
            Writing(landed=lambda _: tx.suspended(write), releases=fence.run_id,
                    pipelined=True),
        )

    async def deliver(self, event: EventRow, judge: tx.Judge) -> tuple[Judgement, EventRow]:
        """Judge and store `event` in one transaction: read the run, its waits,
        its task state versions and any event with the same id; call `judge`;
        store the event with the verdict; if accepted, consume the wait and wake
        the run. A duplicate stores nothing and returns the original event.
        A run it wakes goes straight to an idle worker of this process that
        hosts its code, leased to it in the same transaction (`local_work`)."""
        refs: list[Reference] = []
        large = self.large
        if large is not None and large.outside(event.payload):
            # Kept in the blob store, durable before the event that names it commits.
            seal = await self._large_seal(event.run_id)
            ref = await asyncio.to_thread(_large.put, large, event.payload, What.EVENT, seal)
            event = dataclasses.replace(event, payload=ref.text())
            refs.append(ref)
        local = self.database.local
        lessee = None if local is None else local_work.Lessee(local, self.database.lease_now())
        leased = None
        now = self.clock.now()

        def delivering() -> Flow[tx.Delivered]:
            done = yield from tx.deliver(event, judge, now, lessee)
            if refs and done[1].payload == event.payload:  # kept (not a digest, no duplicate)
                yield from _large.own(event.run_id, refs, now)
            return done

        try:
            # Pipelined (PostgreSQL): BEGIN goes with the two reads, COMMIT with
            # the statements after the judgement, whose errors show there (the
            # write is then rolled back and raises, as one raised sooner would).
            judged, stored, leased = await self.database.write(
                delivering, Writing(landed=lambda attempted: tx.delivered(event, attempted),
                                    pipelined=True))
        finally:
            if lessee is not None:
                lessee.settle(leased)
        return judged, stored

    async def revoke_wait(self, wait_id: str) -> WaitRow:
        """Revoke an open wait and wake its run (it sees `WaitRevoked`)."""
        where = self.database.display
        return await self.database.write(
            lambda: tx.revoke_wait(wait_id, self.clock.now(), where),
            Writing(landed=lambda _: tx.wait_revoked(wait_id)),
        )

    async def unlock_wait(self, wait_id: str) -> WaitRow:
        """Lift the lock bad tokens put on an open wait, and reset their count.
        Raises `WaitNotOpen` if the wait is closed."""
        where = self.database.display
        return await self.database.write(
            lambda: tx.unlock_wait(wait_id, where), Writing())  # safe to run twice

    async def get_event(self, run_id: str, event_id: str) -> EventRow | None:
        return await self.database.read(lambda: common.read_one(
            "get_event", {"run_id": run_id, "event_id": event_id}, _rows.event))

    async def list_events(self, run_id: str, limit: int = 1000) -> list[EventRow]:
        return await self.database.read(lambda: common.read_all(
            "list_events", {"run_id": run_id, "limit": limit}, _rows.event))
