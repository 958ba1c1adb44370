"""The seam between the store's logic and a database.

Every transaction of the store is written once (in `transactions`) as a
*flow*: a generator that yields what it wants done, one step at a time, and
receives each step's answer, like httpx's authentication flow. A step is a
named query (`Query`; each dialect keeps its SQL under that name in its
`queries.sql`) or a journal insert under a fence (`Journal`, which each
dialect makes in its own fastest way). SQLite runs a flow on its writer
thread, PostgreSQL awaits each step on a pooled connection: the decisions
between the steps (the fence, the resume contract, a state change) exist
once.

A backend implements `Database`: connecting and migrating, running flows,
committing journal writes (with its own group commit), claiming runs, waking
idle workers, and translating its driver's errors. Nothing else.
"""

from __future__ import annotations

import abc
import asyncio
import contextvars
import dataclasses
import enum
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from stead import errors
from stead.clock import Clock

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.payloads.sealer import Sealer
    from stead.records import Fence, Presence, Record, ResumeRecord, RunRow, RunStatus
    from stead.store.local_work import Signal
    from stead.store.schema_versions import Report

T = TypeVar("T")

# Whether the writer surely still holds the leases it writes under (its
# worker's `Standing.sure`, set in the context of each run's attempt). A
# write of such a writer that the database keeps failing with a dropped
# connection is tried on past the store's `retry_for` while this says so:
# a worker whose renewals go through is alive, and giving its run up over one
# unlucky write would have the next holder run its calls again.
lease_held: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "stead_lease_held", default=None)


def still_held() -> bool:
    """Whether the current writer surely still holds its leases (see `lease_held`)."""
    held = lease_held.get()
    return held is not None and held()


class Fetch(enum.Enum):
    """What a query's answer is."""

    NOTHING = "nothing"  # None
    ONE = "one"  # the first row, or None
    ALL = "all"  # a list of rows
    COUNT = "count"  # the number of rows the statement changed


@dataclasses.dataclass(frozen=True, slots=True)
class Query:
    """Run the dialect's query `name` with `params`. Rows are read by column
    name (`row["status"]`) on both dialects. A list parameter becomes an array
    on PostgreSQL and JSON text on SQLite (read there with `json_each`). A
    query whose body is empty in a dialect's file does nothing there (a lock
    SQLite's single writer already holds, a NOTIFY it cannot send). A query
    that answers nothing may be several statements in SQLite's file, with a
    `-- then` line between them, run in turn with the same parameters, where
    PostgreSQL's is one statement (a writable CTE: one round trip)."""

    name: str
    params: dict[str, Any]
    fetch: Fetch = Fetch.NOTHING


@dataclasses.dataclass(frozen=True, slots=True)
class Finish:
    """How a run's attempt ends, written with its last records."""

    status: RunStatus
    result: str | None
    error: str | None
    now: float


@dataclasses.dataclass(frozen=True, slots=True)
class FencedWrite:
    """A write of run `fence.run_id`'s journal: `records` and the takeover's
    `resume` record, made only while `fence` holds; with `finish` it also ends
    the run's attempt and releases its lease."""

    fence: Fence
    records: Sequence[Record]
    resume: ResumeRecord | None = None
    finish: Finish | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Journal:
    """Insert `write.records` and `write.resume`. Unless `checked` (the flow
    checked the fence itself, with the `fence` query), only if the fence
    holds: else raise `StaleLease`, having written nothing."""

    write: FencedWrite
    checked: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class OffLoop:
    """Call `fn` (it reads files: a snapshot's blobs) where it cannot hold up
    the event loop: on a thread on PostgreSQL; on SQLite, on the store's
    thread the write runs on (see `Writing.reads_files`). Its answer is
    what `fn` returns."""

    fn: Callable[[], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Together:
    """Reads none of which needs another's answer: their answers, in order.
    Sent in one round trip on PostgreSQL (a pipeline: every statement, then
    one sync), run in turn on SQLite (a statement there costs none). Either
    way each runs once the one before it has ended: a lock the first takes
    is held when the next reads, which sees what the lock made current."""

    queries: tuple[Query, ...]


Step = Query | Journal | OffLoop | Together
Flow = Generator[Step, Any, T]
# Makes a fresh flow (a write that is tried again starts from the beginning).
FlowFactory = Callable[[], Flow[T]]


class NotLanded:
    """A read-back's answer: the write whose commit was unacknowledged did not land."""


NOT_LANDED = NotLanded()
# Reads back whether a write whose commit nobody acknowledged landed: its
# result if it did, NOT_LANDED if not. Given what the unacknowledged attempt
# computed before its commit, or None if that is not known.
Landed = Callable[[T | None], Flow[T | NotLanded]]


@dataclasses.dataclass(frozen=True, slots=True)
class Writing(Generic[T]):
    """How a write goes. `landed` reads back a write whose commit went
    unacknowledged (without it the flow must be safe to run twice).
    `one_statement`: the flow writes with its last statement alone, which may
    commit on its own (or with statements each of which may: a fair claim
    without limits, whose `landed` reads back those that did). `releases`:
    the write gives up that run's lease.
    `reads_files`: the flow reads files (`OffLoop`): SQLite runs it on its
    thread rather than inline on the event loop.
    `pipelined`: on PostgreSQL the transaction goes in a pipeline: BEGIN
    travels with the first statement, a statement whose answer the flow does
    not read with the next that it does, and COMMIT with what is left (a
    delivery: two round trips, not five). A statement's error then shows at
    that next answer or at COMMIT, which the flow must be able to bear.
    `synced=False`: on SQLite the commit does not wait for the disk (a claim:
    see `Connector.transaction`); PostgreSQL syncs every commit."""

    landed: Landed[T] | None = None
    one_statement: bool = False
    releases: str | None = None
    reads_files: bool = False
    pipelined: bool = False
    synced: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class Claim:
    """Take up to `limit` runnable runs whose `workflow@version` is in
    `hosted` for `worker_id`, leased for `lease_seconds` from the
    database's time, none of `exclude`."""

    worker_id: str
    hosted: Sequence[str]
    lease_seconds: float
    limit: int
    exclude: Sequence[str] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class UnsharedClaim:
    """A claim made only while at most one tenant has runs a claim could
    take (`Database.claim_unshared`): the tenants read ('' for runs of none;
    at most `UNSHARED_TENANTS`, by name) and the runs leased, none when
    several tenants were found."""

    tenants: list[str]
    runs: list[RunRow]


# How many ready tenants `claim_unshared` reads: two tell one from several.
UNSHARED_TENANTS = 2


def one(name: str, params: dict[str, Any]) -> Query:
    return Query(name, params, Fetch.ONE)


def rows(name: str, params: dict[str, Any]) -> Query:
    return Query(name, params, Fetch.ALL)


def count(name: str, params: dict[str, Any]) -> Query:
    return Query(name, params, Fetch.COUNT)


def execute(name: str, params: dict[str, Any] | None = None) -> Query:
    return Query(name, params or {})


def together(*queries: Query) -> Together:
    return Together(queries)


def ignore_retry(kind: str) -> None:
    pass


# Told of each store operation a backend tries again, by kind ("locked",
# "connection", "conflict"): `stead.metrics` counts them while it serves.
retried: Callable[[str], None] = ignore_retry


def stale(fence: Fence) -> errors.StaleLease:
    return errors.StaleLease(
        f"worker {fence.worker_id} no longer holds run {fence.run_id} at epoch "
        f"{fence.epoch}: it was taken over or cancelled; the write was rejected"
    )


def fence_params(fence: Fence) -> dict[str, Any]:
    return {"run_id": fence.run_id, "epoch": fence.epoch, "worker_id": fence.worker_id}


class WorkMark:
    """Where a database stood for its idle workers just before a claim looked
    for runs (`Database.work_mark`); what it holds is its backend's own."""


class Database(abc.ABC):
    """What a backend supplies; see the module docstring."""

    url: str
    # Business time: timers, deadlines, expiries the user sets, row times.
    clock: Clock
    # What leases are judged by: None (outside tests) is the database's own
    # clock, read inside each claim and renewal statement (see queries.sql),
    # so no worker's clock decides whether a lease has ended.
    lease_clock: Clock | None
    # The URL as it may be shown (without a password).
    display: str
    # This process's idle workers on the same database, woken by its writes
    # that make work claimable (see `local_work`); None: only the database
    # itself tells workers of work.
    local: Signal | None = None
    # What opening found of the schema's versions and applied (see
    # `schema_versions`); None until it opened.
    versions: Report | None = None
    # What seals payloads on their way in and opens them on their way out
    # (`stead.payloads`, applied by `store._sealing`); None: stored as they are.
    sealer: Sealer | None = None

    def lease_now(self) -> float | None:
        """The `lease_now` parameter of the statements that judge leases:
        the lease clock's time, or None for the database's own."""
        return None if self.lease_clock is None else self.lease_clock.now()

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect, and pass the schema's version gate: migrate as the
        database's `Migrating` allows, or raise (see `schema_versions`)."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def read(self, flow: FlowFactory[T]) -> T:
        """Run a flow that only reads."""

    @abc.abstractmethod
    async def write(self, flow: FlowFactory[T], how: Writing[T]) -> T:
        """Run `flow` in one transaction and commit it (see `Writing`)."""

    @abc.abstractmethod
    async def journal(self, write: FencedWrite, landed: Landed[None]) -> None:
        """Commit a fenced journal write (an append, or a finish), sharing the
        commit with writes made at the same time; raise `StaleLease` (this
        write alone) if its fence no longer holds."""

    @abc.abstractmethod
    async def claim(self, claim: Claim) -> list[RunRow]:
        """Lease runs (see `Claim`) with a fresh epoch each, oldest first."""

    @abc.abstractmethod
    async def claim_unshared(self, claim: Claim) -> UnsharedClaim:
        """`claim`, made only if at most one tenant has runs a claim could
        take (read as `ready_tenants` does), in the same statement where the
        dialect allows: a worker with no reason yet to share among tenants
        pays no round trip to learn it has none."""

    def work_mark(self) -> WorkMark | None:
        """Where the database stands now, taken before a claim looks for runs
        and given to the wait after it (`wait_for_work`'s `since`), so that
        work committed while the claim looked wakes that wait at once; None
        where no mark can be had. This default has none: its waits sleep."""
        return None

    async def wait_for_work(self, timeout: float, *,
                            ring: Callable[[], None] | None = None,
                            since: WorkMark | None = None) -> None:
        """Return when a run may have become claimable, or after `timeout`;
        call `ring` (on the loop) the moment it hears so from outside the
        wait's own task, before the wait returns. `since`: a mark taken
        before the claim that came back with nothing (`work_mark`); work
        committed after it counts as news, even if it came before this wait
        began. This default sleeps (workers poll)."""
        del since
        await asyncio.sleep(timeout)

    def holding(self, run_ids: Sequence[str]) -> None:
        """A claim of this process just leased `run_ids`: their attempts are
        about to write. This default does nothing with them."""
        del run_ids

    async def keep_presence(self, worker_id: str) -> Presence:
        """Hold (or take again) a lock that lives as long as this worker's
        session, which claimers anywhere can see freed when it dies. This
        default has none (a dead holder is then told by its process, on its
        own machine only, or by its lease)."""
        from stead.records import Presence

        return Presence.NONE

    @property
    @abc.abstractmethod
    def commits(self) -> int:
        """Transactions committed through this object (for tests and benches)."""


# The queries whose commit may make a run claimable (see `local_work`).
# `insert_run` is one run's start, whose NOTIFY on PostgreSQL is part of the
# statement itself: on SQLite its commit then pokes the `-wal` as the others'
# do, so an idle worker hears it once it shows, not only by its frames being
# written (which, for the first commit after a checkpoint, looks like a change
# before the commit shows: see `stead.store.sqlite.wal_watch`).
WAKES = frozenset({"notify_work", "accept_event", "insert_run"})


def noting_wakes(flow: FlowFactory[T], noted: list[bool]) -> FlowFactory[T]:
    """`flow`, noting in `noted` whether it asked for a query that wakes
    workers, unless its `tell` parameter is false (an accepted event whose run
    goes straight to a worker of this process). The drivers only send answers
    into flows, never throw."""
    def watched() -> Flow[T]:
        steps = flow()
        answer: Any = None
        try:
            while True:
                step = steps.send(answer)
                asked = step.queries if isinstance(step, Together) else (step,)
                if any(isinstance(q, Query) and q.name in WAKES and q.params.get("tell", True)
                       for q in asked):
                    noted.append(True)
                answer = yield step
        except StopIteration as done:
            return cast(T, done.value)

    return watched
