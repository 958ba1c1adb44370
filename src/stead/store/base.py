"""The store: runs, journals, leases, waits, events and task state, over a
`Database` (SQLite or PostgreSQL). It knows nothing of workflows. Every state
change is one transaction, written once in `transactions`; every write by a
run's holder is fenced by its epoch and raises `StaleLease` when the fence
fails. docs/architecture.md draws the whole."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stead import addresses, errors, keys, processes
from stead.queues import Queue
from stead.records import (
    ActionRow,
    Backlog,
    EventRow,
    Fence,
    HostRow,
    IntentRow,
    Judgement,
    Link,
    MigrationPlan,
    MigrationRow,
    NewFork,
    NewRun,
    Record,
    ResumeRecord,
    RunExport,
    RunRow,
    RunStatus,
    ScheduleRow,
    SnapshotRow,
    StateRow,
    Stranded,
    WaitRow,
    WaitState,
)
from stead.searches import RunSearch
from stead.store import _holders, _rejections, _rows, _streams
from stead.store.seam import Claim, Database, FencedWrite, Finish, Writing
from stead.store.transactions import actions as tx_actions
from stead.store.transactions import common as tx_common
from stead.store.transactions import intents as tx_intents
from stead.store.transactions import journal as tx_journal
from stead.store.transactions import leases as tx_leases
from stead.store.transactions import migrations as tx_migrations
from stead.store.transactions import retention as tx_retention
from stead.store.transactions import runs as tx_runs
from stead.store.transactions import state as tx_state
from stead.store.transactions import waits as tx_waits
from stead.store.transactions import workspaces as tx_workspaces
from stead.stream_records import NewEntry, StreamEntry

Judge = tx_waits.Judge
StateChange = tx_state.StateChange
OutsideChange = tx_state.OutsideChange
Revise = tx_intents.Revise
Guard = tx_intents.Guard


def _outside_branches(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        with addresses.outside_branches():
            return await method(*args, **kwargs)

    call.stead_outside_branches = True  # type: ignore[attr-defined]
    return call


def run_outside_branches(cls: type) -> None:
    """Make every public coroutine of `cls` run outside branches (see `Store`)."""
    for name in dir(cls):
        member = inspect.getattr_static(cls, name)
        if (not name.startswith("_") and inspect.iscoroutinefunction(member)
                and not getattr(member, "stead_outside_branches", False)):
            setattr(cls, name, _outside_branches(member))


class Store:
    """A store's public coroutines run outside the workflow's branches: a task
    a store starts while a run awaits it (a pool waiting for a free connection,
    a group commit's flusher) must not be numbered as one of the run's
    branches, or the run's next gather would get other addresses on replay,
    where that store call is not made. Subclasses get this by themselves."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.url = database.url
        self.clock = database.clock
        # Where the keys that sign wait tokens come from (see `stead.keys`): a
        # hook given to `open_store`, and the key file beside an SQLite file.
        self.key_source: keys.KeySource | None = None
        self.key_file: str | None = None
        self._legacy: bytes | None = None
        self._legacy_read = False
        self._present: set[str] = set()  # workers whose presence lock is marked held

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        run_outside_branches(cls)

    async def open(self) -> None:
        """Connect and migrate the schema."""
        await self.database.open()

    async def close(self) -> None:
        await self.database.close()

    # -- runs ---------------------------------------------------------------
    async def create_run(self, new: NewRun) -> tuple[RunRow, bool]:
        """Insert `new`, unless a live run owns its task_id: then return that
        run and False."""
        made: tuple[RunRow, bool] | None = await self.database.write(
            lambda: tx_runs.create_run(new, self.clock.now()),
            Writing(landed=lambda _: tx_runs.created(new), one_statement=new.intent is None
                    and new.parent_id is None and new.deadline is None),
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
            lambda: tx_runs.create_runs(news, self.clock.now()),
            Writing(landed=lambda _: tx_runs.runs_created(news)),
        )

    async def get_run(self, run_id: str) -> RunRow:
        """Raise `UnknownRun` if there is none."""
        run = await self.database.read(
            lambda: tx_common.read_one("get_run", {"run_id": run_id}, _rows.run))
        if run is None:
            raise tx_common.unknown_run(run_id, self.database.display)
        return run

    async def list_runs(
        self, *, status: str | None = None, workflow: str | None = None, limit: int = 100
    ) -> list[RunRow]:
        return await self.database.read(lambda: tx_common.read_all(
            "list_runs", {"status": status, "workflow": workflow, "limit": limit}, _rows.run))

    async def children(self, run_id: str, limit: int = 100) -> list[RunRow]:
        """The runs `run_id` started with `run.child`, oldest first."""
        return await self.database.read(lambda: tx_common.read_all(
            "children", {"run_id": run_id, "limit": limit}, _rows.run))

    async def search_runs(self, search: RunSearch) -> list[RunRow]:
        """Runs, newest first, filtered by each criterion `search` gives."""
        return await self.database.read(
            lambda: tx_common.read_all("search_runs", search.params(), _rows.run))

    async def count_runs(self) -> dict[RunStatus, int]:
        """How many runs are in each status (statuses with none left out)."""
        found = await self.database.read(lambda: tx_common.read_all(
            "count_runs_by_status", {}, lambda row: (row["status"], int(row["runs"]))))
        return {RunStatus(status): n for status, n in found}

    async def live_run_of_task(self, task_id: str) -> RunRow | None:
        """The live run of `task_id`, if it has one."""
        return await self.database.read(
            lambda: tx_common.read_one("find_live_task", {"task_id": task_id}, _rows.run))

    async def backlog(self) -> list[Backlog]:
        """What workers could take, by `workflow@version`: runs runnable now,
        and runs leased to a worker (with the soonest lease end)."""
        return await self.database.read(lambda: tx_common.read_all(
            "backlog", {"now": self.clock.now(), "lease_now": self.database.lease_now()},
            _rows.backlog))

    async def leased_runs(self, limit: int = 100) -> list[RunRow]:
        """Runs whose lease has not ended, the soonest end first."""
        return await self.database.read(lambda: tx_common.read_all(
            "leased_runs", {"lease_now": self.database.lease_now(), "limit": limit},
            _rows.run))

    async def lease_now(self) -> float:
        """The time leases are judged at: the database's clock (or the lease
        clock the store was opened with), the one `RunRow.lease_expires_at`
        is on."""
        found = await self.database.read(lambda: tx_common.read_one(
            "lease_now", {"lease_now": self.database.lease_now()}, lambda row: float(row["now"])))
        assert found is not None  # the query always returns its one row
        return found

    async def cancel_run(self, run_id: str) -> RunRow:
        """Cancel a live run and bump its epoch, so its holder's next write
        fails. Twice is once: the second finds it cancelled."""
        where = self.database.display
        return await self.database.write(
            lambda: tx_actions.cancel_run(run_id, self.clock.now(), where),
            Writing(one_statement=True),
        )

    async def resume_stopped(
        self, run_id: str, expect_status: RunStatus, record: Record | None
    ) -> RunRow:
        """A human's decision on a run stopped as `expect_status`: journal `record`
        (if any; its seq and epoch are assigned here) and make the run claimable
        again, with a new epoch, in one transaction. Raises `NotStopped` if the run is
        not (or no longer) in that status, `UnknownRun` if there is none."""
        where = self.database.display
        return await self.database.write(
            lambda: tx_actions.resume_stopped(run_id, expect_status, record, self.clock.now(),
                                              where),
            Writing(landed=lambda _: tx_actions.resumed(run_id, expect_status, record)),
        )

    # -- lineage --------------------------------------------------------------
    async def fork_run(self, fork: NewFork) -> RunRow:
        """Create the fork (see `NewFork`) and link it to its parent, in one
        transaction. `UnknownRun` if the parent is gone."""
        where = self.database.display
        return await self.database.write(
            lambda: tx_runs.fork_run(fork, self.clock.now(), where),
            Writing(landed=lambda _: tx_runs.linked(fork.new.run_id)),
        )

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
            lambda: tx_runs.continue_run(write, new, at_seq, end.now),
            Writing(landed=lambda _: tx_runs.linked(new.run_id), releases=fence.run_id),
        )

    async def lineage(self, run_id: str) -> tuple[Link | None, list[Link]]:
        """The run's parent link (None: none) and its forks and successor."""
        return await self.database.read(lambda: tx_runs.lineage(run_id))

    async def state_version(self, task_key: str, version: int) -> StateRow | None:
        """A task's state as it was at `version`."""
        return await self.database.read(lambda: tx_state.state_version(task_key, version))

    async def state_since(self, task_key: str, version: int,
                          limit: int = 100) -> list[StateRow]:
        """The task's versions written after `version`, oldest first, each with
        the run that wrote it or who changed it from outside and why: what a
        run resuming on `version` has not seen."""
        return await self.database.read(lambda: tx_common.read_all(
            "state_since", {"task_key": task_key, "version": version, "limit": limit},
            _rows.state_history))

    # -- leases -------------------------------------------------------------
    async def claim(
        self, worker_id: str, hosted: Sequence[str], lease_seconds: float, limit: int,
        exclude: Sequence[str] = (),
    ) -> list[RunRow]:
        """Take up to `limit` runnable runs whose `workflow@version` is in
        `hosted`, each with a fresh epoch and a lease until now + lease_seconds.
        `exclude` lists runs the caller still executes (a late heartbeat must
        not make a worker take over its own run). Runs in a queue are left to
        `claim_queue`."""
        return await self.database.claim(
            Claim(worker_id, hosted, lease_seconds, limit, exclude))

    async def claim_queue(
        self, queue: Queue, worker_id: str, hosted: Sequence[str], lease_seconds: float,
        limit: int, exclude: Sequence[str] = (),
    ) -> list[RunRow]:
        """`claim` for the runs of `queue`: no more than its limits leave room
        for (counted in the claim's transaction, under the queue's lock, so
        they hold across every worker of the database), lowest priority number
        first, then oldest."""
        params: dict[str, Any] = {"worker_id": worker_id, "hosted": list(hosted),
                                  "exclude": list(exclude), "now": self.clock.now(),
                                  "lease_now": self.database.lease_now(),
                                  "lease_seconds": lease_seconds}
        # A read first: an idle worker's poll takes no lock and commits nothing.
        if not await self.queue_ready(queue, hosted, exclude):
            return []
        return await self.database.write(
            lambda: tx_leases.claim_queue(queue, params, limit),
            Writing(landed=lambda _: tx_leases.queue_claimed(queue, params)),
        )

    async def queue_ready(
        self, queue: Queue, hosted: Sequence[str], exclude: Sequence[str] = (),
    ) -> bool:
        """Whether `queue` has a run of `hosted` code that is not leased and
        may run now (its limits may still hold it back)."""
        probe = {"queue": queue.name, "hosted": list(hosted), "exclude": list(exclude),
                 "now": self.clock.now(), "lease_now": self.database.lease_now()}
        found = await self.database.read(lambda: tx_common.read_one("queue_ready", probe, bool))
        return bool(found)

    async def renew(
        self, fences: Sequence[Fence], lease_seconds: float,
        in_flight: Mapping[Fence, str | None] | None = None,
    ) -> list[Fence]:
        """Extend the leases still held; return the fences that were lost.
        Renewing twice is renewing. `in_flight` gives, for the fences it
        names, the started markers of the calls in flight not yet journaled
        (see `replay.markers_text`; None: none), which a takeover counts as
        died attempts."""
        return await self.database.write(
            lambda: tx_leases.renew(fences, lease_seconds, self.database.lease_now(),
                                    in_flight or {}),
            Writing(one_statement=True),
        )

    async def release(self, fence: Fence) -> None:
        """Give the run back (it stays runnable); no-op if already lost."""
        await self.database.write(
            lambda: tx_leases.release(fence, self.clock.now()),
            Writing(one_statement=True, releases=fence.run_id),
        )

    async def record_process(self, worker_id: str) -> None:
        """Record the process `worker_id` runs in (this one), so that claimers
        on this machine can tell when it has died (see `end_dead_leases`)."""
        me, now = processes.this_process(), self.clock.now()
        await self.database.write(lambda: _holders.record(worker_id, me, now), Writing())

    async def keep_presence(self, worker_id: str) -> None:
        """Hold `worker_id`'s presence lock, where the database has one
        (PostgreSQL: see store/postgres/presence.py), and say so in its
        process row, so claimers on any machine can tell when it died."""
        if await self.database.keep_presence(worker_id) and worker_id not in self._present:
            await self.database.write(lambda: _holders.mark_locks(worker_id), Writing())
            self._present.add(worker_id)

    async def forget_process(self, worker_id: str) -> None:
        await self.database.write(lambda: _holders.forget(worker_id), Writing())

    async def end_dead_leases(self, worker_id: str, limit: int = 100) -> list[str]:
        """End now the leases of the workers (other than `worker_id`) whose
        process is known dead, so the next claim takes their runs without
        waiting their leases out; the dead workers' ids. Holders this machine
        cannot judge keep their leases (see stead/processes.py)."""
        lease_now = self.database.lease_now()
        gone = await self.database.read(
            lambda: _holders.dead_holders(worker_id, lease_now, processes.dead, limit,
                                          processes.this_process().machine))
        if gone:
            await self.database.write(lambda: _holders.end_leases(gone, lease_now), Writing())
        return gone

    # -- journal ------------------------------------------------------------
    async def load_journal(self, run_id: str) -> list[Record]:
        """The whole journal in one query, ordered by seq."""
        return await self.database.read(
            lambda: tx_common.read_all("load_journal", {"run_id": run_id}, _rows.record))

    async def journal_page(self, run_id: str, start: int, limit: int) -> list[Record]:
        """At most `limit` records from seq `start` on, ordered by seq."""
        return await self.database.read(lambda: tx_common.read_all(
            "journal_page", {"run_id": run_id, "start": start, "limit": limit}, _rows.record))

    async def journal_size(self, run_id: str) -> tuple[int, int]:
        """How many records the journal holds, and its last seq (-1: none)."""
        size = await self.database.read(lambda: tx_common.read_one(
            "journal_size", {"run_id": run_id},
            lambda row: (int(row["records"]), int(row["last_seq"]))))
        return size or (0, -1)

    async def journal_summaries(self, run_id: str) -> list[Record]:
        """The journal's effect, model-call and workspace records, by seq."""
        return await self.database.read(lambda: tx_common.read_all(
            "journal_summaries", {"run_id": run_id}, _rows.record))

    async def append(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None = None
    ) -> None:
        """Commit `records` (and the takeover's resume record) in one fenced
        transaction."""
        write = FencedWrite(fence, records, resume)
        await self.database.journal(write, lambda _: tx_journal.journaled(write))

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
        write = FencedWrite(fence, records, resume, end)
        await self.database.journal(write, lambda _: tx_journal.journaled(write))

    async def list_resumes(self, run_id: str) -> list[ResumeRecord]:
        return await self.database.read(
            lambda: tx_common.read_all("list_resumes", {"run_id": run_id}, _rows.resume))

    # -- waits and events -----------------------------------------------------
    async def open_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait: WaitRow,
    ) -> None:
        """Journal `records` and create `wait` (state open) in one fenced transaction."""
        write = FencedWrite(fence, records, resume)
        await self.database.write(
            lambda: tx_waits.open_wait(write, wait),
            Writing(landed=lambda _: tx_waits.wait_opened(wait.wait_id)),
        )

    async def get_wait(self, wait_id: str) -> WaitRow | None:
        return await self.database.read(
            lambda: tx_common.read_one("get_wait", {"wait_id": wait_id}, _rows.wait))

    async def list_waits(
        self, *, run_id: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[WaitRow]:
        return await self.database.read(lambda: tx_common.read_all(
            "list_waits", {"run_id": run_id, "state": state, "limit": limit}, _rows.wait))

    async def close_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait_id: str, state: WaitState,
    ) -> None:
        """Move an open wait to `state` (expired, revoked) and journal `records`, in
        one fenced transaction. Raises `WaitNotOpen` (writing nothing) if the wait
        was consumed or closed meanwhile."""
        write = FencedWrite(fence, records, resume)
        await self.database.write(
            lambda: tx_waits.close_wait(write, wait_id, state, self.clock.now()),
            Writing(landed=lambda _: tx_waits.wait_closed(write, wait_id, state)),
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
            lambda: tx_waits.suspend(write, wake_at, wait_ids, self.clock.now(), children),
            Writing(landed=lambda _: tx_waits.suspended(write), releases=fence.run_id),
        )

    async def deliver(self, event: EventRow, judge: Judge) -> tuple[Judgement, EventRow]:
        """Judge and store `event` in one transaction: read the run, its waits,
        its task state versions and any event with the same id; call `judge`;
        store the event with the verdict; if accepted, consume the wait and wake
        the run. A duplicate stores nothing and returns the original event."""
        return await self.database.write(
            lambda: tx_waits.deliver(event, judge, self.clock.now()),
            Writing(landed=lambda attempted: tx_waits.delivered(event, attempted)),
        )

    async def revoke_wait(self, wait_id: str) -> WaitRow:
        """Revoke an open wait and wake its run (it sees `WaitRevoked`)."""
        where = self.database.display
        return await self.database.write(
            lambda: tx_waits.revoke_wait(wait_id, self.clock.now(), where),
            Writing(landed=lambda _: tx_waits.wait_revoked(wait_id)),
        )

    async def unlock_wait(self, wait_id: str) -> WaitRow:
        """Lift the lock bad tokens put on an open wait, and reset their count.
        Raises `WaitNotOpen` if the wait is closed."""
        where = self.database.display
        return await self.database.write(
            lambda: tx_waits.unlock_wait(wait_id, where), Writing())  # safe to run twice

    async def get_event(self, run_id: str, event_id: str) -> EventRow | None:
        return await self.database.read(lambda: tx_common.read_one(
            "get_event", {"run_id": run_id, "event_id": event_id}, _rows.event))

    async def list_events(self, run_id: str, limit: int = 1000) -> list[EventRow]:
        return await self.database.read(lambda: tx_common.read_all(
            "list_events", {"run_id": run_id, "limit": limit}, _rows.event))

    # -- durable streams ----------------------------------------------------
    async def append_stream(self, fence: Fence, name: str, new: NewEntry) -> int:
        """Append `new` to run `fence.run_id`'s stream `name` while `fence`
        holds (else `StaleLease`); its offset. An entry whose key is there
        already is not appended again: its offset is returned. `StreamClosed`
        after the stream's `closed` entry."""
        return await self.database.write(
            lambda: _streams.append(fence, name, new),
            Writing(landed=lambda _: _streams.appended(fence.run_id, name, new.key),
                    one_statement=_streams.one_statement(new)))

    async def read_stream(self, run_id: str, name: str, after: int = 0,
                          limit: int = _streams.PAGE) -> list[StreamEntry]:
        """Up to `limit` entries of the stream after offset `after`, in order."""
        return await self.database.read(lambda: _streams.read(run_id, name, after, limit))

    # -- the operator's audit ----------------------------------------------
    async def record_action(self, row: ActionRow) -> ActionRow:
        """Keep an operator's action (done or refused) in the run's audit.
        Twice with one `action_id` is once."""
        return await self.database.write(lambda: tx_actions.record_action(row),
                                         Writing(one_statement=True))

    async def list_actions(self, run_id: str, limit: int = 1000) -> list[ActionRow]:
        """The operator actions on a run, oldest first."""
        return await self.database.read(lambda: tx_common.read_all(
            "list_operator_actions", {"run_id": run_id, "limit": limit}, _rows.action))

    # -- task state ---------------------------------------------------------
    async def read_state(self, task_key: str) -> StateRow | None:
        return await self.database.read(
            lambda: tx_common.read_one("read_state", {"task_key": task_key}, _rows.state))

    async def state_history(self, task_key: str, limit: int = 100) -> list[StateRow]:
        """The task's versions of its facts, newest first (`updated_at`: when
        each was written, `run_id`: by which run)."""
        return await self.database.read(lambda: tx_common.read_all(
            "list_state_history", {"task_key": task_key, "limit": limit},
            _rows.state_history))

    async def update_state(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        task_key: str, change: StateChange,
    ) -> tuple[StateRow | None, Record]:
        """Compare-and-set in one fenced transaction: `change` sees the current
        state and returns the new data (None: refused) and the status and payload
        of the last of `records`, which is journaled with them. Returns the state
        now in force (None if there is none) and that last record as written."""
        write = FencedWrite(fence, records, resume)
        return await self.database.write(
            lambda: tx_state.update_state(write, task_key, change, self.clock.now()),
            Writing(landed=lambda attempted: tx_state.state_updated(write, attempted)),
        )

    async def set_state(self, task_key: str, change: OutsideChange, *, author: str,
                        why: str) -> StateRow:
        """Change a task's state from outside any run, in one transaction:
        `change` makes the new data from the state in force (raising refuses
        it: nothing is written); the version written keeps who and why."""
        now = self.clock.now()
        return await self.database.write(
            lambda: tx_state.set_state(task_key, change, author, why, now),
            Writing(landed=lambda attempted: tx_state.state_set(task_key, attempted)),
        )

    # -- intents -------------------------------------------------------------
    async def revise_intent(
        self, run_id: str, revise: Revise, *, author: str, why: str,
        write: FencedWrite | None = None, resume: RunStatus | None = None,
    ) -> tuple[IntentRow, RunRow]:
        """Add the next version of the run's intent, made by `revise` from the
        one in force, in one transaction: by its holder (`write`: fenced, its
        records journaled with it), or by a person, who may `resume` a run
        stopped in that status (`NotStopped` if it is not)."""
        where, now = self.database.display, self.clock.now()
        return await self.database.write(
            lambda: tx_intents.revise_intent(run_id, revise, author, why, now, where,
                                     write=write, resume=resume),
            Writing(landed=lambda attempted: tx_intents.intent_revised(run_id, attempted)),
        )

    async def guarded_append(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        guard: Guard,
    ) -> None:
        """Journal `records` in one fenced transaction, only if `guard` allows
        them under the intent in force at that moment (else it raises)."""
        write = FencedWrite(fence, records, resume)
        await self.database.write(
            lambda: tx_intents.guarded_journal(write, guard, self.clock.now()),
            Writing(landed=lambda _: tx_journal.journaled(write)),
        )

    async def latest_intent(self, run_id: str) -> IntentRow | None:
        return await self.database.read(lambda: tx_intents.latest_intent(run_id))

    async def list_intents(self, run_id: str) -> list[IntentRow]:
        return await self.database.read(lambda: tx_common.read_all(
            "list_intents", {"run_id": run_id}, _rows.intent))

    async def takeover_context(
        self, run_id: str, *, journal: bool,
    ) -> tuple[list[Record], list[IntentRow], ResumeRecord | None]:
        """In one read: the journal (if `journal`), the intent's versions and
        the last resume record."""
        return await self.database.read(lambda: tx_journal.takeover_context(run_id, journal))

    async def end_stopped(
        self, run_id: str, expect_status: RunStatus, status: RunStatus, error: str,
    ) -> RunRow:
        """A person ends a run stopped as `expect_status` with the terminal
        `status` (and `error` saying why). `NotStopped` if it is not stopped so."""
        where = self.database.display
        return await self.database.write(
            lambda: tx_actions.end_stopped(run_id, expect_status, status, error, self.clock.now(),
                                   where),
            Writing(one_statement=True),
        )

    # -- deploys: heartbeats, stranded runs, migrations, imports ----------------
    async def heartbeat(self, worker_id: str, served: Sequence[tuple[str, str]], *,
                        policy_version: str | None, live_for: float,
                        forget_after: float = 7 * 24 * 3600.0) -> None:
        """Say `worker_id` is alive for `live_for` seconds more, serves each
        `(workflow@version, role)` (a `HostRole`) and runs `policy_version`
        (None: its app has no policy), which deliveries to waits bound to a
        policy version compare; heartbeats older than `forget_after` seconds
        are dropped."""
        now = self.clock.now()
        await self.database.write(
            lambda: tx_leases.heartbeat(worker_id, served, now, now - forget_after, policy_version,
                                 now + live_for), Writing())

    async def host_stopped(self, worker_id: str) -> None:
        """`worker_id` stopped cleanly: it serves nothing any more."""
        now = self.clock.now()
        await self.database.write(lambda: tx_leases.host_stopped(worker_id, now), Writing())

    async def worker_hosts(self, limit: int = 1000) -> list[HostRow]:
        """Every worker's last heartbeat per version it serves, latest first."""
        return await self.database.read(lambda: tx_leases.hosts(limit))

    async def stranded_runs(self, grace: float, limit: int = 100,
                            workflow: str | None = None) -> list[Stranded]:
        """Runnable runs (of `workflow`, if given) that no worker has served
        for `grace` seconds (and that have waited at least that long), oldest first."""
        now, lease_now = self.clock.now(), self.database.lease_now()
        return await self.database.read(
            lambda: tx_leases.stranded(now, now - grace, limit, lease_now, workflow))

    async def migrate_run(self, plan: MigrationPlan, *, fence: Fence | None = None,
                          resume: ResumeRecord | None = None) -> tuple[RunRow, MigrationRow]:
        """Apply `plan` in one transaction (see `transactions.migrations.migrate_run`):
        the old journal is archived, never deleted. Raises `MigrationRefused`
        (nothing written) if the run moved since the plan was made."""
        where, now = self.database.display, self.clock.now()
        return await self.database.write(
            lambda: tx_migrations.migrate_run(plan, fence, resume, now, where,
                                              self.database.lease_now()),
            Writing(landed=lambda _: tx_migrations.migrated(plan.run_id, plan)),
        )

    async def rollback_run(self, run_id: str, author: str, resume: ResumeRecord
                           ) -> tuple[RunRow, MigrationRow]:
        """Undo the run's last migration if nothing was journaled since
        (`MigrationRefused` if something was, or there is none)."""
        where, now = self.database.display, self.clock.now()
        return await self.database.write(
            lambda: tx_migrations.rollback_run(run_id, author, resume, now, where,
                                    self.database.lease_now()),
            Writing(landed=lambda _: tx_migrations.rolled_back(run_id)),
        )

    async def list_migrations(self, run_id: str) -> list[MigrationRow]:
        return await self.database.read(lambda: tx_common.read_all(
            "list_migrations", {"run_id": run_id}, _rows.migration))

    async def archived_journal(self, run_id: str, migration: int) -> list[Record]:
        """The journal as it was before the run's migration number `migration`."""
        return await self.database.read(lambda: tx_common.read_all(
            "load_archive", {"run_id": run_id, "migration": migration}, _rows.record))

    async def import_run(self, run: RunRow, journal: Sequence[Record],
                         waits: Sequence[WaitRow], state: StateRow | None = None) -> RunRow:
        """Store a run exported from another database, with its journal,
        waits and task state (kept only if the task has none here).
        `InvalidInput` if its id, or a live run of its task, exists."""
        where = self.database.display
        return await self.database.write(
            lambda: tx_retention.import_run(run, journal, waits, state, where),
            Writing(landed=lambda _: tx_retention.imported(run)),
        )
    # -- child runs, cancellation ------------------------------------------------
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
            lambda: tx_runs.start_child(write, child, self.clock.now()),
            Writing(landed=lambda attempted: tx_runs.child_started(write, attempted)),
        )

    async def request_cancel(self, run_id: str) -> RunRow:
        """Cancel a live run and its live children: a running one is asked to
        stop at its next call boundary (`cancel_requested`), any other is
        cancelled at once. Twice is once."""
        where = self.database.display
        return await self.database.write(
            lambda: tx_actions.request_cancel(run_id, self.clock.now(), where), Writing())

    async def cancel_requests(self, run_ids: Sequence[str]) -> list[str]:
        """Of `run_ids`, the running runs someone asked to cancel."""
        return await self.database.read(lambda: tx_actions.cancel_requests(run_ids))

    # -- schedules --------------------------------------------------------------
    async def fire_schedule(
        self, name: str, cron: str, due: tx_runs.Due, make: Callable[[float], NewRun],
    ) -> tuple[list[tuple[float, RunRow]], float]:
        """Start the runs of the ticks of schedule `name` that `due` says are
        due, and move its next tick on, in one transaction; each tick once,
        however many workers fire at once. Returns the (tick, run)s started
        and the next tick not yet fired."""
        now = self.clock.now()
        return await self.database.write(
            lambda: tx_runs.fire_schedule(name, cron, due, make, now), Writing())

    async def list_schedules(self) -> list[ScheduleRow]:
        return await self.database.read(
            lambda: tx_common.read_all("list_schedules", {}, _rows.schedule))

    # -- retention -----------------------------------------------------------------
    async def prunable(self, cutoff: float, limit: int) -> list[str]:
        """Up to `limit` finished runs last changed before `cutoff` that may be
        deleted, oldest first (see `prune`)."""
        return await self.database.read(lambda: tx_retention.prunable(cutoff, limit))

    async def export_runs(self, run_ids: Sequence[str]) -> list[RunExport]:
        """Everything stored of each of `run_ids`."""
        return await self.database.read(lambda: tx_retention.export_runs(run_ids))

    async def prune(self, cutoff: float, run_ids: Sequence[str]) -> list[str]:
        """Delete those of `run_ids` that still may be (finished before
        `cutoff`, not live, no live parent, no effect with an unknown
        outcome: checked again in this transaction), and everything stored
        of them. Returns the runs deleted."""
        return await self.database.write(
            lambda: tx_retention.delete_runs(cutoff, run_ids), Writing())

    async def prune_rejected(self, cutoff: float, limit: int) -> int:
        """Delete up to `limit` rejected events received before `cutoff`, of
        any run (see `store._rejections`). Returns how many."""
        return await self.database.write(lambda: _rejections.prune(cutoff, limit), Writing())

    async def prunable_rejected(self, cutoff: float) -> int:
        """How many rejected events were received before `cutoff`."""
        return await self.database.read(lambda: _rejections.prunable(cutoff))

    async def rejected_dropped(self, run_id: str | None) -> int:
        """How many rejected events of `run_id` (None: to runs that do not
        exist) were no longer kept: only the newest are (`store._rejections`)."""
        return await self.database.read(
            lambda: _rejections.dropped(_rejections.UNKNOWN if run_id is None else run_id))

    # -- settings -----------------------------------------------------------
    async def keyring(self) -> keys.Keyring:
        """The keys that sign and verify wait tokens (see `stead.keys`; never
        kept in this database). A database that still holds the secret it
        signed tokens with before (`stead_meta`) lends it as the `legacy` key,
        so runs that opened waits with it replay; no new secret is made here."""
        ring = keys.resolve(self.key_source, self.key_file)
        if ring.legacy is not None:
            return ring
        if not self._legacy_read:
            value = await self.database.read(lambda: tx_common.read_one(
                "get_meta", {"key": "secret"}, lambda row: str(row["value"])))
            self._legacy = None if value is None else bytes.fromhex(value)
            self._legacy_read = True
        return ring.with_legacy(self._legacy)

    async def wait_for_work(self, timeout: float) -> None:
        """Return when a run may have become claimable, or after `timeout`
        seconds (SQLite: soon after any commit to the file; PostgreSQL: on
        NOTIFY)."""
        await self.database.wait_for_work(timeout)

    @property
    def commits(self) -> int:
        """Transactions committed by this store's database object (for tests
        and benches)."""
        return self.database.commits

    # -- workspaces -----------------------------------------------------------
    async def save_snapshot(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        snapshot: SnapshotRow, hashes: Sequence[str], read: tx_workspaces.BlobReader, *,
        more: Sequence[SnapshotRow] = (),
    ) -> int:
        """Store a workspace snapshot (and the snapshots `more` of other
        workspaces), the blobs of `hashes` not stored yet (`read` gives a
        blob's content by its sha256) and `records`, in one fenced
        transaction. Returns the bytes of blobs added (`snapshot` counts them)."""
        write = FencedWrite(fence, records, resume)
        seq = records[-1].seq
        return await self.database.write(
            lambda: tx_workspaces.save_snapshot(write, snapshot, hashes, read, more),
            Writing(landed=lambda attempted: tx_workspaces.snapshot_saved(write, seq, attempted),
                    reads_files=bool(hashes)),
        )

    async def list_snapshots(self, run_id: str) -> list[SnapshotRow]:
        """Every snapshot of the run's workspaces, in journal order."""
        return await self.database.read(lambda: tx_common.read_all(
            "list_snapshots", {"run_id": run_id}, _rows.snapshot))

    async def read_blobs(self, hashes: Sequence[str]) -> dict[str, bytes]:
        """The stored blobs of `hashes` (those the database holds)."""
        if not hashes:
            return {}
        return await self.database.read(lambda: tx_workspaces.read_blobs(hashes))


run_outside_branches(Store)
