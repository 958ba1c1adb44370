"""A run's intent: its versions, and the appends it guards."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead.store import _rows
from stead.store.base.part import StorePart
from stead.store.seam import FencedWrite, Writing
from stead.store.transactions import common, journal
from stead.store.transactions import intents as tx

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import Fence, IntentRow, Record, ResumeRecord, RunRow, RunStatus


class Intents(StorePart):
    """The `Store`'s operations on a run's intent."""

    async def revise_intent(
        self, run_id: str, revise: tx.Revise, *, author: str, why: str,
        write: FencedWrite | None = None, resume: RunStatus | None = None,
    ) -> tuple[IntentRow, RunRow]:
        """Add the next version of the run's intent, made by `revise` from the
        one in force, in one transaction: by its holder (`write`: fenced, its
        records journaled with it), or by a person, who may `resume` a run
        stopped in that status (`NotStopped` if it is not)."""
        where, now = self.database.display, self.clock.now()
        return await self.database.write(
            lambda: tx.revise_intent(run_id, revise, author, why, now, where,
                                     write=write, resume=resume),
            Writing(landed=lambda attempted: tx.intent_revised(run_id, attempted)),
        )

    async def guarded_append(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        guard: tx.Guard,
    ) -> None:
        """Journal `records` in one fenced transaction, only if `guard` allows
        them under the intent in force at that moment (else it raises)."""
        write = FencedWrite(fence, records, resume)
        await self.database.write(
            lambda: tx.guarded_journal(write, guard, self.clock.now()),
            Writing(landed=lambda _: journal.journaled(write), pipelined=True),
        )

    async def latest_intent(self, run_id: str) -> IntentRow | None:
        return await self.database.read(lambda: tx.latest_intent(run_id))

    async def list_intents(self, run_id: str) -> list[IntentRow]:
        return await self.database.read(lambda: common.read_all(
            "list_intents", {"run_id": run_id}, _rows.intent))
