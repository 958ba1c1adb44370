"""The store: runs, journals, leases, waits, events and task state, over a
`Database` (SQLite or PostgreSQL). It knows nothing of workflows. Every state
change is one transaction, written once in `_transactions`; every write by a
run's holder is fenced by its epoch and raises `StaleLease` when the fence
fails. docs/architecture.md draws the whole."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from stead import addresses, errors, keys
from stead.queues import Queue
from stead.records import (
    Backlog,
    EventRow,
    Fence,
    IntentRow,
    Judgement,
    NewRun,
    Record,
    ResumeRecord,
    RunRow,
    RunStatus,
    StateRow,
    WaitRow,
    WaitState,
)
from stead.store import _rows
from stead.store import _transactions as tx
from stead.store.seam import Claim, Database, FencedWrite, Finish, Writing

Judge = tx.Judge
StateChange = tx.StateChange
Revise = tx.Revise
Guard = tx.Guard


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
            lambda: tx.create_run(new, self.clock.now()),
            Writing(landed=lambda _: tx.created(new), one_statement=new.intent is None),
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
            Writing(landed=lambda _: tx.runs_created(news)),
        )

    async def get_run(self, run_id: str) -> RunRow:
        """Raise `UnknownRun` if there is none."""
        run = await self.database.read(
            lambda: tx.read_one("get_run", {"run_id": run_id}, _rows.run))
        if run is None:
            raise tx.unknown_run(run_id, self.database.display)
        return run

    async def list_runs(
        self, *, status: str | None = None, workflow: str | None = None, limit: int = 100
    ) -> list[RunRow]:
        return await self.database.read(lambda: tx.read_all(
            "list_runs", {"status": status, "workflow": workflow, "limit": limit}, _rows.run))

    async def backlog(self) -> list[Backlog]:
        """What workers could take, by `workflow@version`: runs runnable now,
        and runs leased to a worker (with the soonest lease end)."""
        return await self.database.read(lambda: tx.read_all(
            "backlog", {"now": self.clock.now()}, _rows.backlog))

    async def leased_runs(self, limit: int = 100) -> list[RunRow]:
        """Runs whose lease has not ended, the soonest end first."""
        return await self.database.read(lambda: tx.read_all(
            "leased_runs", {"now": self.clock.now(), "limit": limit}, _rows.run))

    async def cancel_run(self, run_id: str) -> RunRow:
        """Cancel a live run and bump its epoch, so its holder's next write
        fails. Twice is once: the second finds it cancelled."""
        where = self.database.display
        return await self.database.write(
            lambda: tx.cancel_run(run_id, self.clock.now(), where),
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
            lambda: tx.resume_stopped(run_id, expect_status, record, self.clock.now(), where),
            Writing(landed=lambda _: tx.resumed(run_id, expect_status, record)),
        )

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
        now = self.clock.now()
        params: dict[str, Any] = {"worker_id": worker_id, "hosted": list(hosted),
                                  "exclude": list(exclude), "now": now,
                                  "expires": now + lease_seconds}
        # A read first: an idle worker's poll takes no lock and commits nothing.
        if not await self.queue_ready(queue, hosted, exclude):
            return []
        return await self.database.write(
            lambda: tx.claim_queue(queue, params, limit),
            Writing(landed=lambda _: tx.queue_claimed(queue, params)),
        )

    async def queue_ready(
        self, queue: Queue, hosted: Sequence[str], exclude: Sequence[str] = (),
    ) -> bool:
        """Whether `queue` has a run of `hosted` code that is not leased and
        may run now (its limits may still hold it back)."""
        probe = {"queue": queue.name, "hosted": list(hosted), "exclude": list(exclude),
                 "now": self.clock.now()}
        found = await self.database.read(lambda: tx.read_one("queue_ready", probe, bool))
        return bool(found)

    async def renew(self, fences: Sequence[Fence], lease_seconds: float) -> list[Fence]:
        """Extend the leases still held; return the fences that were lost.
        Renewing twice is renewing."""
        return await self.database.write(
            lambda: tx.renew(fences, self.clock.now() + lease_seconds),
            Writing(one_statement=True),
        )

    async def release(self, fence: Fence) -> None:
        """Give the run back (it stays runnable); no-op if already lost."""
        await self.database.write(
            lambda: tx.release(fence, self.clock.now()),
            Writing(one_statement=True, releases=fence.run_id),
        )

    # -- journal ------------------------------------------------------------
    async def load_journal(self, run_id: str) -> list[Record]:
        """The whole journal in one query, ordered by seq."""
        return await self.database.read(
            lambda: tx.read_all("load_journal", {"run_id": run_id}, _rows.record))

    async def append(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None = None
    ) -> None:
        """Commit `records` (and the takeover's resume record) in one fenced
        transaction."""
        write = FencedWrite(fence, records, resume)
        await self.database.journal(write, lambda _: tx.journaled(write))

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
        await self.database.journal(write, lambda _: tx.journaled(write))

    async def list_resumes(self, run_id: str) -> list[ResumeRecord]:
        return await self.database.read(
            lambda: tx.read_all("list_resumes", {"run_id": run_id}, _rows.resume))

    # -- waits and events -----------------------------------------------------
    async def open_wait(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wait: WaitRow,
    ) -> None:
        """Journal `records` and create `wait` (state open) in one fenced transaction."""
        write = FencedWrite(fence, records, resume)
        await self.database.write(
            lambda: tx.open_wait(write, wait),
            Writing(landed=lambda _: tx.wait_opened(wait.wait_id)),
        )

    async def get_wait(self, wait_id: str) -> WaitRow | None:
        return await self.database.read(
            lambda: tx.read_one("get_wait", {"wait_id": wait_id}, _rows.wait))

    async def list_waits(
        self, *, run_id: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[WaitRow]:
        return await self.database.read(lambda: tx.read_all(
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
            lambda: tx.close_wait(write, wait_id, state, self.clock.now()),
            Writing(landed=lambda _: tx.wait_closed(write, wait_id, state)),
        )

    async def suspend(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        wake_at: float | None, wait_ids: Sequence[str],
    ) -> None:
        """Journal `records`, release the lease and park the run as waiting until
        an event or `wake_at`. Raises `WaitNotOpen` (writing nothing) if one of
        `wait_ids` is no longer open: an event arrived, do not sleep."""
        write = FencedWrite(fence, records, resume)
        await self.database.write(
            lambda: tx.suspend(write, wake_at, wait_ids, self.clock.now()),
            Writing(landed=lambda _: tx.suspended(write), releases=fence.run_id),
        )

    async def deliver(self, event: EventRow, judge: Judge) -> tuple[Judgement, EventRow]:
        """Judge and store `event` in one transaction: read the run, its waits,
        its task state versions and any event with the same id; call `judge`;
        store the event with the verdict; if accepted, consume the wait and wake
        the run. A duplicate stores nothing and returns the original event."""
        return await self.database.write(
            lambda: tx.deliver(event, judge, self.clock.now()),
            Writing(landed=lambda attempted: tx.delivered(event, attempted)),
        )

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
        return await self.database.read(lambda: tx.read_one(
            "get_event", {"run_id": run_id, "event_id": event_id}, _rows.event))

    async def list_events(self, run_id: str, limit: int = 1000) -> list[EventRow]:
        return await self.database.read(lambda: tx.read_all(
            "list_events", {"run_id": run_id, "limit": limit}, _rows.event))

    # -- task state ---------------------------------------------------------
    async def read_state(self, task_key: str) -> StateRow | None:
        return await self.database.read(
            lambda: tx.read_one("read_state", {"task_key": task_key}, _rows.state))

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
            lambda: tx.update_state(write, task_key, change, self.clock.now()),
            Writing(landed=lambda attempted: tx.state_updated(write, attempted)),
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
            lambda: tx.revise_intent(run_id, revise, author, why, now, where,
                                     write=write, resume=resume),
            Writing(landed=lambda attempted: tx.intent_revised(run_id, attempted)),
        )

    async def guarded_append(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        guard: Guard,
    ) -> None:
        """Journal `records` in one fenced transaction, only if `guard` allows
        them under the intent in force at that moment (else it raises)."""
        write = FencedWrite(fence, records, resume)
        await self.database.write(
            lambda: tx.guarded_journal(write, guard, self.clock.now()),
            Writing(landed=lambda _: tx.journaled(write)),
        )

    async def latest_intent(self, run_id: str) -> IntentRow | None:
        return await self.database.read(lambda: tx.latest_intent(run_id))

    async def list_intents(self, run_id: str) -> list[IntentRow]:
        return await self.database.read(lambda: tx.read_all(
            "list_intents", {"run_id": run_id}, _rows.intent))

    async def takeover_context(
        self, run_id: str, *, journal: bool,
    ) -> tuple[list[Record], list[IntentRow], ResumeRecord | None]:
        """In one read: the journal (if `journal`), the intent's versions and
        the last resume record."""
        return await self.database.read(lambda: tx.takeover_context(run_id, journal))

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
            value = await self.database.read(lambda: tx.read_one(
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


run_outside_branches(Store)
