"""A run's journal and its durable streams: reading them, and the fenced
appends and finishes of the run's holder."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead.payloads.envelope import What
from stead.store import _large, _rows
from stead.store.base.part import StorePart
from stead.store.seam import FencedWrite, Finish, Flow, Writing
from stead.store.transactions import common
from stead.store.transactions import journal as tx

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import Fence, Record, ResumeRecord, RunStatus, TakeoverContext
    from stead.stream_records import NewEntry, StreamEntry

# Entries a reader gets per read.
STREAM_PAGE = 500


class Journals(StorePart):
    """The `Store`'s operations on a run's journal and its durable streams.
    The streams' flows (`store._streams`) are imported by the two methods
    that run them: a store that only lists runs never loads them."""

    async def load_journal(self, run_id: str) -> list[Record]:
        """The whole journal in one query, ordered by seq."""
        return await self.database.read(
            lambda: common.read_all("load_journal", {"run_id": run_id}, _rows.record))

    async def journal_page(self, run_id: str, start: int, limit: int) -> list[Record]:
        """At most `limit` records from seq `start` on, ordered by seq."""
        return await self.database.read(lambda: common.read_all(
            "journal_page", {"run_id": run_id, "start": start, "limit": limit}, _rows.record))

    async def journal_size(self, run_id: str) -> tuple[int, int]:
        """How many records the journal holds, and its last seq (-1: none)."""
        size = await self.database.read(lambda: common.read_one(
            "journal_size", {"run_id": run_id},
            lambda row: (int(row["records"]), int(row["last_seq"]))))
        return size or (0, -1)

    async def journal_summaries(self, run_id: str) -> list[Record]:
        """The journal's effect, model-call and workspace records, by seq."""
        return await self.database.read(lambda: common.read_all(
            "journal_summaries", {"run_id": run_id}, _rows.record))

    async def journal_model_calls(self, run_id: str) -> list[Record]:
        """The journal's answered model calls and steps, by seq: what a run's
        conversation is read from (`stead.conversations.transcript`), the
        steps holding an SDK's model calls included."""
        return await self.database.read(lambda: common.read_all(
            "journal_model_calls", {"run_id": run_id}, _rows.record))

    async def append(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None = None
    ) -> None:
        """Commit `records` (and the takeover's resume record) in one fenced
        transaction."""
        await self._journal(FencedWrite(fence, records, resume))

    async def finish(
        self,
        fence: Fence,
        status: RunStatus,
        *,
        result: str | None = None,
        error: str | None = None,
        records: Sequence[Record] = (),
        resume: ResumeRecord | None = None,
    ) -> None:
        """End the run's attempt with `status` (terminal, or stopped for a human),
        releasing the lease, in one fenced transaction."""
        end = Finish(status, result, error, self.clock.now())
        await self._journal(FencedWrite(fence, records, resume, end))

    async def _journal(self, write: FencedWrite) -> None:
        """Commit `write`: through the group commit, or, when it holds a
        payload over the inline limit, with its blobs written first and its
        run's ownership of them in the same transaction."""
        large = self.large
        if large is None or not _large.outside(large, write):
            await self.database.journal(write, lambda _: tx.journaled(write))
            return
        seal = await self._large_seal(write.fence.run_id)
        write, refs = await _large.referenced(large, write, seal)
        now = self.clock.now()
        await self.database.write(
            lambda: _large.journal_owning(write, refs, now),
            Writing(landed=lambda _: tx.journaled(write),
                    releases=None if write.finish is None else write.fence.run_id))

    async def list_resumes(self, run_id: str) -> list[ResumeRecord]:
        return await self.database.read(
            lambda: common.read_all("list_resumes", {"run_id": run_id}, _rows.resume))

    async def resumes_since(self, since: float) -> int:
        """How many takeovers were recorded at or after `since`."""
        found = await self.database.read(lambda: common.read_one(
            "count_resumes_since", {"since": since}, lambda row: int(row["takeovers"])))
        return found or 0

    async def takeover_context(
        self, run_id: str, *, journal: bool, task_key: str, revalidate: bool,
    ) -> TakeoverContext:
        """In one read: the journal (if `journal`), the intent's versions and
        the last resume record (if `revalidate`), and task `task_key`'s state."""
        return await self.database.read(
            lambda: tx.takeover_context(run_id, journal, task_key, revalidate))

    async def append_stream(self, fence: Fence, name: str, new: NewEntry) -> int:
        """Append `new` to run `fence.run_id`'s stream `name` while `fence`
        holds (else `StaleLease`); its offset. An entry whose key is there
        already is not appended again: its offset is returned. `StreamClosed`
        after the stream's `closed` entry."""
        from stead.store import _streams

        large = self.large
        if large is None or not large.outside(new.text):
            return await self.database.write(
                lambda: _streams.append(fence, name, new),
                Writing(landed=lambda _: _streams.appended(fence.run_id, name, new.key),
                        one_statement=_streams.one_statement(new)))
        seal = await self._large_seal(fence.run_id)
        ref = await asyncio.to_thread(_large.put, large, new.text, What.STREAM, seal)
        new = dataclasses.replace(new, text=ref.text())
        now = self.clock.now()

        def appending() -> Flow[int]:
            offset = yield from _streams.append(fence, name, new)
            yield from _large.own(fence.run_id, [ref], now)
            return offset

        return await self.database.write(
            appending, Writing(landed=lambda _: _streams.appended(fence.run_id, name, new.key)))

    async def read_stream(self, run_id: str, name: str, after: int = 0,
                          limit: int = STREAM_PAGE) -> list[StreamEntry]:
        """Up to `limit` entries of the stream after offset `after`, in order."""
        from stead.store import _streams

        return await self.database.read(lambda: _streams.read(run_id, name, after, limit))
