"""A task's state: read, changed by the run that holds it or by a person,
and its versions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead.store import _rows
from stead.store.base.part import StorePart
from stead.store.seam import FencedWrite, Writing
from stead.store.transactions import common
from stead.store.transactions import state as tx

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import Fence, Record, ResumeRecord, StateRow


class TaskState(StorePart):
    """The `Store`'s operations on a task's state."""

    async def read_state(self, task_key: str) -> StateRow | None:
        return await self.database.read(
            lambda: common.read_one("read_state", {"task_key": task_key}, _rows.state))

    async def state_history(self, task_key: str, limit: int = 100) -> list[StateRow]:
        """The task's versions of its facts, newest first (`updated_at`: when
        each was written, `run_id`: by which run)."""
        return await self.database.read(lambda: common.read_all(
            "list_state_history", {"task_key": task_key, "limit": limit},
            _rows.state_history))

    async def state_version(self, task_key: str, version: int) -> StateRow | None:
        """A task's state as it was at `version`."""
        return await self.database.read(lambda: tx.state_version(task_key, version))

    async def state_since(self, task_key: str, version: int,
                          limit: int = 100) -> list[StateRow]:
        """The task's versions written after `version`, oldest first, each with
        the run that wrote it or who changed it from outside and why: what a
        run resuming on `version` has not seen."""
        return await self.database.read(lambda: common.read_all(
            "state_since", {"task_key": task_key, "version": version, "limit": limit},
            _rows.state_history))

    async def update_state(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        task_key: str, change: tx.StateChange,
    ) -> tuple[StateRow | None, Record]:
        """Compare-and-set in one fenced transaction: `change` sees the current
        state and returns the new data (None: refused) and the status and payload
        of the last of `records`, which is journaled with them. Returns the state
        now in force (None if there is none) and that last record as written."""
        write = FencedWrite(fence, records, resume)
        return await self.database.write(
            lambda: tx.update_state(write, task_key, change, self.clock.now()),
            Writing(landed=lambda attempted: tx.state_updated(write, attempted)),
        )

    async def set_state(self, task_key: str, change: tx.OutsideChange, *, author: str,
                        why: str) -> StateRow:
        """Change a task's state from outside any run, in one transaction:
        `change` makes the new data from the state in force (raising refuses
        it: nothing is written); the version written keeps who and why."""
        now = self.clock.now()
        return await self.database.write(
            lambda: tx.set_state(task_key, change, author, why, now),
            Writing(landed=lambda attempted: tx.state_set(task_key, attempted)),
        )
