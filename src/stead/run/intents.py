"""`Run.intent`: the workflow declares a new version of its run's intent,
journaled, and checked from then on."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from stead import addresses, codec, errors, records
from stead.records import RecordKind, RecordStatus, RunRow
from stead.run.base import Part
from stead.store.seam import FencedWrite

if TYPE_CHECKING:
    from stead.intent import Intent


class Intents(Part):
    """The run's declared intent."""

    async def intent(self, intent: Intent, *, why: str = "declared by the workflow") -> int:
        """Declare a new version of the run's intent (grants with `expires_in`
        count from now); returns its version. Journaled: a replay returns the
        recorded version and changes nothing."""
        # Imported by the first intent declared: runs without one never load them.
        from stead import guard
        from stead.intent import Intent, check_tools

        if not isinstance(intent, Intent):
            raise TypeError("run.intent takes a stead.Intent")
        addr = addresses.reserve()
        text = intent.dumps()
        digest = codec.digest(text, why)
        prior = self._x.take(addr, RecordKind.INTENT, "intent", digest)
        if prior:
            return int(codec.loads(prior[-1].payload)["version"])
        self._x.check_live()
        check_tools(intent, self._x.tools, self._x.app_name)
        anchored = intent.anchored(self._x.clock.now()).dumps()
        x = self._x
        holder: list[int] = []

        def revise(current: records.IntentRow | None, _run: RunRow) -> str:
            made = (current.version if current else 0) + 1
            if holder and made != holder[0]:
                raise errors.InvalidIntent(
                    f"run {self.id}: its intent changed while it ran (now version {made - 1}); "
                    "the declaration was not stored. Declare it again, or let a takeover "
                    "pick up the change")
            return anchored

        def send(batch: list[records.Record], resume: records.ResumeRecord | None
                 ) -> Awaitable[tuple[records.IntentRow, RunRow]]:
            # The record says which version it made: known inside the transaction.
            version = (x.guard.version if x.guard is not None else 0) + 1
            holder[:] = [version]
            rec = batch[-1].evolve(payload=codec.dumps({"version": version}, what="intent"))
            return x.store.revise_intent(x.fence.run_id, revise, author=f"workflow {self.workflow}",
                                         why=why, write=FencedWrite(x.fence, [*batch[:-1], rec],
                                                                    resume))

        rec = x.record(addr, 1, RecordKind.INTENT, "intent", digest, RecordStatus.OK,
                       codec.dumps({"version": 0}, what="intent"))
        row, _ = await x.write([rec], send)
        if x.guard is not None:
            x.guard.adopt(row)
        else:
            # The run had nothing to check until now: from here on its budget
            # counts what it journaled so far (all of it is stored: this
            # worker holds the run), and each write adds to it.
            ledger = guard.Ledger()
            with x.busy():
                ledger.count(await x.store.load_journal(self.id))
            x.guard = guard.Guard(self._row, row, None, ledger)
        return row.version
