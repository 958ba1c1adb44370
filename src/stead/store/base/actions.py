"""What is done to a run from outside its worker: cancelling it,
resuming or ending one stopped for a person, and the operator's audit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead.store import _rows
from stead.store.base.part import StorePart
from stead.store.seam import Writing
from stead.store.transactions import actions as tx
from stead.store.transactions import common

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import ActionRow, Record, RunRow, RunStatus


class Actions(StorePart):
    """The `Store`'s operations on what is done to a run from outside its worker."""

    async def cancel_run(self, run_id: str) -> RunRow:
        """Cancel a live run and bump its epoch, so its holder's next write
        fails. Twice is once: the second finds it cancelled."""
        where = self.database.display
        return await self.database.write(
            lambda: tx.cancel_run(run_id, self.clock.now(), where),
            Writing(one_statement=True),
        )

    async def request_cancel(self, run_id: str) -> RunRow:
        """Cancel a live run and its live children: a running one is asked to
        stop at its next call boundary (`cancel_requested`), any other is
        cancelled at once. Twice is once."""
        where = self.database.display
        return await self.database.write(
            lambda: tx.request_cancel(run_id, self.clock.now(), where), Writing())

    async def cancel_requests(self, run_ids: Sequence[str]) -> list[str]:
        """Of `run_ids`, the running runs someone asked to cancel."""
        return await self.database.read(lambda: tx.cancel_requests(run_ids))

    async def resume_stopped(
        self, run_id: str, expect_status: RunStatus, record: Record | None
    ) -> RunRow:
        """A human's decision on a run stopped as `expect_status`: journal `record`
        (if any; its seq and epoch are assigned here) and make the run claimable
        again, with a new epoch, in one transaction. Raises `NotStopped` if the run is
        not (or no longer) in that status, `UnknownRun` if there is none."""
        where = self.database.display
        return await self.database.write(
            lambda: tx.resume_stopped(run_id, expect_status, record, self.clock.now(), where),
            Writing(landed=lambda _: tx.resumed(run_id, expect_status, record)),
        )

    async def end_stopped(
        self, run_id: str, expect_status: RunStatus, status: RunStatus, error: str,
    ) -> RunRow:
        """A person ends a run stopped as `expect_status` with the terminal
        `status` (and `error` saying why). `NotStopped` if it is not stopped so."""
        where = self.database.display
        return await self.database.write(
            lambda: tx.end_stopped(run_id, expect_status, status, error, self.clock.now(),
                                   where),
            Writing(one_statement=True),
        )

    async def record_action(self, row: ActionRow) -> ActionRow:
        """Keep an operator's action (done or refused) in the run's audit.
        Twice with one `action_id` is once."""
        return await self.database.write(lambda: tx.record_action(row),
                                         Writing(one_statement=True))

    async def list_actions(self, run_id: str, limit: int = 1000) -> list[ActionRow]:
        """The operator actions on a run, oldest first."""
        return await self.database.read(lambda: common.read_all(
            "list_operator_actions", {"run_id": run_id, "limit": limit}, _rows.action))
