"""What the workers of a fleet share through the store: the versions each
serves, whether each is alive, the runs waiting to be claimed, the runs no
live worker serves, and the schedules they fire."""

from __future__ import annotations

import dataclasses
import enum

from stead.records.runs import RunRow


@dataclasses.dataclass(frozen=True, slots=True)
class Backlog:
    """Runs of one `workflow@version` that a worker could take: `runnable` now
    (pending, released, lease expired, or a sleeper that is due), and `leased`
    to a worker, the soonest of those leases ending at `next_expiry`."""

    workflow: str
    version: int
    runnable: int
    leased: int
    next_expiry: float | None

    @property
    def code(self) -> str:
        return f"{self.workflow}@{self.version}"


class Presence(enum.StrEnum):
    """A worker's presence lock, as its lease keeper just found it (see
    `Store.keep_presence`)."""

    HELD = "held"  # held since it was last looked at
    TAKEN = "taken"  # taken just now (first, or again after its session dropped)
    LOST = "lost"  # its session dropped and it could not be taken back yet
    NONE = "none"  # this database holds none (SQLite; or no session to hold one on)


class HostRole(enum.StrEnum):
    """How a worker serves a `workflow@version` (see `HostRow`)."""

    HOSTS = "hosts"  # it runs that version's code
    MIGRATES = "migrates"  # it claims runs of that version to migrate them to one it hosts


@dataclasses.dataclass(frozen=True, slots=True)
class HostRow:
    """A worker's last heartbeat for one `code` (`workflow@version`) it serves."""

    worker_id: str
    code: str
    role: HostRole
    started_at: float
    seen_at: float
    stopped_at: float | None = None  # it stopped cleanly then
    policy_version: str | None = None  # what its app's policy is (None: none)
    live_until: float | None = None  # gone if not heard from again by then
    # The stead release its code is, and the schema version that code needs
    # (None: a release before 0.2.0, which did not say).
    stead_version: str | None = None
    schema_version: int | None = None


class Liveness(enum.StrEnum):
    """Whether a worker's process is alive, by the test the claimers use to
    end a dead holder's leases early (see `Store.worker_liveness`)."""

    ALIVE = "alive"
    DEAD = "dead"
    UNKNOWN = "unknown"  # nothing here can tell: its lease decides


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerLiveness:
    """A worker's `verdict`, and why (`reason`, in words)."""

    worker_id: str
    verdict: Liveness
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class Stranded:
    """A runnable run no live worker serves: no worker has hosted (or
    migrated) its `workflow@version` since `hosted_at` (None: none ever did,
    as far as this database knows). Its status is unchanged; a worker that
    serves the version takes it as any other."""

    run: RunRow
    hosted_at: float | None

    @property
    def code(self) -> str:
        return f"{self.run.workflow}@{self.run.version}"


class Missed(enum.StrEnum):
    """What a schedule does with the ticks that passed while no worker ran."""

    SKIP = "skip"  # none: the next run is at the next tick to come
    ONCE = "once"  # one run, for the latest tick missed
    ALL = "all"  # a run for every tick missed


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A schedule as stored: the next tick not yet fired, of `cron`."""

    name: str
    cron: str
    next_tick: float
    updated_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class LiveRuns:
    """How many live runs of `workflow@version` are in `status`, and when the
    oldest of them last changed (`updated_at`)."""

    workflow: str
    version: int
    status: str
    runs: int
    oldest: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class QueueDepth:
    """The runs a worker could claim now in one queue ("" for runs in none),
    and since when the one that has waited longest was ready."""

    queue: str
    runnable: int
    ready_since: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class Gauges:
    """What the store holds now that a scrape reports: live runs, queues, and
    the open waits (those expiring before `soon` counted apart). Read by
    `Store.gauges` in one transaction of a few indexed aggregates."""

    live: tuple[LiveRuns, ...]
    queues: tuple[QueueDepth, ...]
    waits_open: int
    waits_expiring: int
    # PostgreSQL: how many days after today (UTC), one after another, have
    # their journal partitions made (2 when the workers keep them, -1 when
    # today's is missing: its runs go to journal_dated_other). None: SQLite.
    days_ahead: int | None = None
