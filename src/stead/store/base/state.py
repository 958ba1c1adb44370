"""A task's state: read, changed by the run that holds it or by a person,
and its versions. A state over the inline limit is kept by reference
(`store._large_state`): `read_state` and `state_version` read it back;
`state_history` and `state_since` give the versions as stored (a large one's
data is its reference, which names its size)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead import errors
from stead.records import StateRow
from stead.store import _large, _large_state, _rows
from stead.store.base.part import StorePart
from stead.store.seam import FencedWrite, Writing
from stead.store.transactions import common
from stead.store.transactions import state as tx

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import Fence, Record, ResumeRecord


class TaskState(StorePart):
    """The `Store`'s operations on a task's state."""

    async def read_state(self, task_key: str) -> StateRow | None:
        """The state in force (a large one read back from the blob store)."""
        return await _large_state.resolved(self.database, self.large,
                                           await self._stored_state(task_key))

    async def _stored_state(self, task_key: str) -> StateRow | None:
        return await self.database.read(
            lambda: common.read_one("read_state", {"task_key": task_key}, _rows.state))

    async def state_history(self, task_key: str, limit: int = 100) -> list[StateRow]:
        """The task's versions of its facts, newest first (`updated_at`: when
        each was written, `run_id`: by which run)."""
        return await self.database.read(lambda: common.read_all(
            "list_state_history", {"task_key": task_key, "limit": limit},
            _rows.state_history))

    async def state_version(self, task_key: str, version: int) -> StateRow | None:
        """A task's state as it was at `version` (a large one read back)."""
        row = await self.database.read(lambda: tx.state_version(task_key, version))
        return await _large_state.resolved(self.database, self.large, row)

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
        now in force (None if there is none) and that last record as written.
        With a blob store, a state in force or a new state over the inline
        limit, or a record, is made before the transaction (see
        `_update_referenced`)."""
        write = FencedWrite(fence, records, resume)
        large = self.large
        if large is None or not any(large.outside(r.payload) for r in records):
            inline = None if large is None else large.inline_bytes
            # Pipelined (PostgreSQL): BEGIN with the fence's check, the key's
            # lock with the state's read, the writes with COMMIT.
            how: Writing[tx.Updated] = Writing(
                landed=lambda attempted: tx.state_updated(write, attempted), pipelined=True)
            done = await self.database.write(
                lambda: tx.update_state(write, task_key, change, self.clock.now(), inline), how)
            if isinstance(done, tuple):
                return done
        return await self._update_referenced(write, task_key, change)

    async def _update_referenced(self, write: FencedWrite, task_key: str,
                                 change: tx.StateChange) -> tuple[StateRow | None, Record]:
        """`update_state` by reference: the state read (and read back), the
        change made from it, the new state's blob and the records' written,
        then one fenced transaction commits their references if the state
        is still the one read; else it starts over (a blob of the attempt
        that lost is an orphan `stead blobs gc` removes)."""
        large = self.large
        if large is None:  # only a state kept by reference comes here
            raise _large_state.no_blob_store(task_key, None)
        seal = await self._large_seal(write.fence.run_id)
        outside = await self._states_outside()
        for _ in range(_large_state.ATTEMPTS):
            seen = await self._stored_state(task_key)
            current = await _large_state.resolved(self.database, large, seen)
            data, status, payload = change(current)
            stored, ref, sealing = (None, None, None) if data is None else (
                await _large_state.stored(self.database, large, task_key, data,
                                          outside=outside))
            last = write.records[-1].evolve(status=status, payload=payload)
            plain = dataclasses.replace(write, records=[*write.records[:-1], last])
            by_ref, journal_refs = await _large.referenced(large, plain, seal)
            made = tx.Referenced(seen, stored, () if ref is None else (ref,),
                                 tuple(journal_refs), sealing)
            done = await self._commit_update(by_ref, task_key, made)
            if isinstance(done, tuple):
                row = done[0]
                return (current if row is None or data is None
                        else dataclasses.replace(row, data=data)), last
        raise _moved(task_key)

    async def _commit_update(self, write: FencedWrite, task_key: str,
                             made: tx.Referenced) -> tx.Updated:
        return await self.database.write(
            lambda: tx.update_referenced(write, task_key, made, self.clock.now()),
            Writing(landed=lambda attempted: tx.state_updated(write, attempted)))

    async def set_state(self, task_key: str, change: tx.OutsideChange, *, author: str,
                        why: str) -> StateRow:
        """Change a task's state from outside any run, in one transaction:
        `change` makes the new data from the state in force (raising refuses
        it: nothing is written); the version written keeps who and why. A
        large state is made before the transaction, as `update_state`'s."""
        now = self.clock.now()
        large = self.large
        how: Writing[tx.Set] = Writing(landed=lambda attempted: tx.state_set(task_key, attempted),
                                       pipelined=True)
        done = await self.database.write(
            lambda: tx.set_state(task_key, change, author, why, now,
                                 None if large is None else large.inline_bytes), how)
        if isinstance(done, StateRow):
            return done
        if large is None:  # only a state kept by reference comes here
            raise _large_state.no_blob_store(task_key, None)
        outside = await self._states_outside()
        for _ in range(_large_state.ATTEMPTS):
            seen = await self._stored_state(task_key)
            data = change(await _large_state.resolved(self.database, large, seen))
            stored, ref, sealing = await _large_state.stored(self.database, large, task_key,
                                                             data, outside=outside)
            made = tx.Referenced(seen, stored, () if ref is None else (ref,), (), sealing)
            found = await self._commit_set(task_key, made, author, why)
            if isinstance(found, StateRow):
                return dataclasses.replace(found, data=data)
        raise _moved(task_key)

    async def _commit_set(self, task_key: str, made: tx.Referenced, author: str,
                          why: str) -> tx.Set:
        now = self.clock.now()
        return await self.database.write(
            lambda: tx.set_referenced(task_key, made, author, why, now),
            Writing(landed=lambda attempted: tx.state_set(task_key, attempted)))


def _moved(task_key: str) -> errors.StoreError:
    return errors.StoreError(
        f"task {task_key}: its state changed {_large_state.ATTEMPTS} times while a large new "
        "state was written to the blob store; nothing was changed. Try again")
