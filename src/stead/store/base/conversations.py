"""The requests a run's model calls sent: stored with the call's record,
read back to show the conversation each call saw (see
`stead.store.transactions.conversations`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead.store.base.part import StorePart
from stead.store.seam import NOT_LANDED, FencedWrite, Flow, NotLanded, Writing
from stead.store.transactions import conversations as tx
from stead.store.transactions import journal
from stead.store.transactions import spend as spend_tx

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import Fence, Record, ResumeRecord
    from stead.store.transactions.spend import Settlement


class Conversations(StorePart):
    """The `Store`'s operations on the parts of model calls' requests."""

    async def save_model_call(self, fence: Fence, records: Sequence[Record],
                              resume: ResumeRecord | None, parts: Sequence[tx.Part],
                              outcome: Settlement | None = None) -> None:
        """Store `parts` (the messages and parameters of a model call's
        request the run does not hold yet) and journal `records`, in one
        fenced transaction; with `outcome`, the call's spend reservation
        settled or released in it too."""
        write = FencedWrite(fence, records, resume)
        now = self.clock.now()
        settle = None if outcome is None else (lambda: spend_tx.settle(write, outcome, now))

        def landed(_: None) -> Flow[NotLanded | None]:
            done = yield from journal.records_landed(fence.run_id, records, resume)
            return None if done else NOT_LANDED

        await self.database.write(lambda: tx.save(write, parts, settle),
                                  Writing(landed=landed))

    async def conversation_parts(self, run_id: str) -> dict[str, tx.Part]:
        """Every message and request parameters the run's model calls stored,
        by name."""
        return await self.database.read(lambda: tx.read(run_id))
