"""The runs a store holds: starting them (one, a batch, a child, a fork, a
successor, a schedule's ticks), finding them, and their lineage."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from stead import errors
from stead.payloads import references
from stead.records import RunStatus
from stead.store import _large, _large_forks, _large_state, _rows
from stead.store.base.part import StorePart
from stead.store.seam import FencedWrite, Finish, Flow, Writing
from stead.store.transactions import common
from stead.store.transactions import runs as tx

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.payloads.references import Reference
    from stead.records import (
        Fence,
        Link,
        NewFork,
        NewRun,
        Record,
        ResumeRecord,
        RunRow,
        ScheduleRow,
    )
    from stead.searches import RunSearch


class Runs(StorePart):
    """The `Store`'s operations on starting and finding runs."""

    async def create_run(self, new: NewRun) -> tuple[RunRow, bool]:
        """Insert `new`, unless a live run owns its task_id: then return that
        run and False."""
        made: tuple[RunRow, bool] | None = await self.database.write(
            lambda: tx.create_run(new, self.clock.now()),
            # A run of a tenant names it after the insert, and its quotas are
            # checked under the tenant's lock first: one transaction.
            Writing(landed=lambda _: tx.created(new), one_statement=new.intent is None
                    and new.parent_id is None and new.deadline is None and new.tenant is None,
                    pipelined=True),
        )
        if made is None:
            raise errors.StoreError(
                f"could not create run {new.run_id} (task {new.task_id!r}): it conflicts "
                "with another run that is not live; try again"
            )
        return made

    async def create_runs(self, news: Sequence[NewRun]) -> list[tuple[RunRow, bool]]:
        """Insert a batch of runs in one transaction: all or none. For each, in
        order, the new run and True, or the live run owning its task id or its
        queue's dedup key (one earlier in the batch too) and False."""
        if not news:
            return []
        return await self.database.write(
            lambda: tx.create_runs(news, self.clock.now()),
            Writing(landed=lambda _: tx.runs_created(news), pipelined=True),
        )

    async def get_run(self, run_id: str) -> RunRow:
        """Raise `UnknownRun` if there is none."""
        run = await self.database.read(
            lambda: common.read_one("get_run", {"run_id": run_id}, _rows.run))
        if run is None:
            raise common.unknown_run(run_id, self.database.display)
        return run

    async def list_runs(
        self, *, status: str | None = None, workflow: str | None = None, limit: int = 100,
        tenant: str | None = None,
    ) -> list[RunRow]:
        query = "list_runs" if status is None else "list_runs_of_status"
        return await self.database.read(lambda: common.read_all(
            query, {"status": status, "workflow": workflow, "limit": limit,
                    "tenant": tenant}, _rows.run))

    async def children(self, run_id: str, limit: int = 100) -> list[RunRow]:
        """The runs `run_id` started with `run.child`, oldest first."""
        return await self.database.read(lambda: common.read_all(
            "children", {"run_id": run_id, "limit": limit}, _rows.run))

    async def search_runs(self, search: RunSearch) -> list[RunRow]:
        """Runs, newest first, filtered by each criterion `search` gives."""
        params = search.params()
        query = "search_runs" if params["status"] is None else "search_runs_of_status"
        return await self.database.read(lambda: common.read_all(query, params, _rows.run))

    async def count_runs(self, *, tenant: str | None = None) -> dict[RunStatus, int]:
        """How many runs (of `tenant`, if given) are in each status (statuses
        with none left out)."""
        found = await self.database.read(lambda: common.read_all(
            "count_runs_by_status" if tenant is None else "count_tenant_runs_by_status",
            {} if tenant is None else {"tenant": tenant},
            lambda row: (row["status"], int(row["runs"]))))
        return {RunStatus(status): n for status, n in found}

    async def live_run_of_task(self, task_id: str) -> RunRow | None:
        """The live run of `task_id`, if it has one."""
        return await self.database.read(
            lambda: common.read_one("find_live_task", {"task_id": task_id}, _rows.run))

    async def fork_run(self, fork: NewFork) -> RunRow:
        """Create the fork (see `NewFork`) and link it to its parent, in one
        transaction. `UnknownRun` if the parent is gone. With a blob store,
        the fork owns the blobs its copied records name (a sealed one sealed
        again under its own key first), so it replays them once its parent
        is pruned; and a task state over the inline limit is seeded by
        reference, its blob written first under the fork's own task key."""
        where = self.database.display
        large = self.large
        refs: list[Reference] = []
        if large is not None and any(references.is_reference(r.payload) for r in fork.records):
            seal = await self._large_seal(fork.new.run_id)
            copied, refs = await _large_forks.adopted(self.database, large, fork.records,
                                                fork.parent_id, seal)
            fork = dataclasses.replace(fork, records=tuple(copied))
        seeded = fork.state
        state_ref, sealing = None, None
        if seeded is not None:
            outside = large is not None and large.outside(seeded.data) and \
                await self._states_outside()
            data, state_ref, sealing = await _large_state.stored(
                self.database, large, seeded.task_key, seeded.data, outside=outside)
            fork = dataclasses.replace(fork, state=dataclasses.replace(seeded, data=data))
        made_fork = fork

        def forking() -> Flow[RunRow]:
            now = self.clock.now()
            made = yield from tx.fork_run(made_fork, now, where)
            yield from _large.own(made_fork.new.run_id, refs, now)
            if seeded is not None and state_ref is not None:
                scope = _large_state.owner(seeded.task_key)
                if not (yield from _large_state.key_unchanged(sealing, scope)):
                    raise errors.StoreError(f"the task state of {scope} was forgotten while "
                                            "the fork was made; nothing was written")
                yield from _large_state.own(seeded.task_key, made_fork.new.run_id, (state_ref,),
                                            now)
            return made

        return await self.database.write(
            forking, Writing(landed=lambda _: tx.linked(made_fork.new.run_id)))

    async def continue_run(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        result: str, new: NewRun, at_seq: int,
    ) -> RunRow:
        """End the run held by `fence` as completed (`result`, with `records`;
        its journal then holds `at_seq` records) and create its successor
        `new` on the same task, linked to it, in one fenced transaction;
        returns the successor."""
        end = Finish(RunStatus.COMPLETED, result, None, self.clock.now())
        write = FencedWrite(fence, records, resume, end)
        return await self.database.write(
            lambda: tx.continue_run(write, new, at_seq, end.now),
            Writing(landed=lambda _: tx.linked(new.run_id), releases=fence.run_id),
        )

    async def lineage(self, run_id: str) -> tuple[Link | None, list[Link]]:
        """The run's parent link (None: none) and its forks and successor."""
        return await self.database.read(lambda: tx.lineage(run_id))

    async def start_child(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        child: NewRun,
    ) -> tuple[RunRow, Record]:
        """Create the child run `child` (unless it exists: its id is derived
        from the parent's call) and journal its id in the parent (the last of
        `records`, whose payload is set here), in one fenced transaction.
        Returns the child and that record as written."""
        write = FencedWrite(fence, records, resume)
        return await self.database.write(
            lambda: tx.start_child(write, child, self.clock.now()),
            Writing(landed=lambda attempted: tx.child_started(write, attempted),
                    pipelined=True),
        )

    async def fire_schedule(
        self, name: str, cron: str, due: tx.Due, make: Callable[[float], NewRun],
    ) -> tuple[list[tuple[float, RunRow]], float]:
        """Start the runs of the ticks of schedule `name` that `due` says are
        due, and move its next tick on, in one transaction; each tick once,
        however many workers fire at once. Returns the (tick, run)s started
        and the next tick not yet fired."""
        now = self.clock.now()
        return await self.database.write(
            lambda: tx.fire_schedule(name, cron, due, make, now), Writing())

    async def list_schedules(self) -> list[ScheduleRow]:
        return await self.database.read(
            lambda: common.read_all("list_schedules", {}, _rows.schedule))
