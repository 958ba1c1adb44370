"""The rows stead stores, as frozen records, and the closed sets of values
their fields take.

A run's journal is an append-only list of `Record`s. `seq` is the position in
commit order (gapless, one writer at a time); `addr` is the call's deterministic
identity in the workflow code (see `addresses`), which is what replay matches.

Statuses, kinds, states, verdicts, rejection reasons and resume classes are
`StrEnum`s: a member is a `str` equal to its value, so it is stored, compared,
hashed, formatted and written as JSON exactly as that string. Rows read from
the store may carry the plain string instead of the member; code therefore
compares these fields with `==` and `in`, never with `is`, `isinstance` or
`.value`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any, Self, TypeVar

E = TypeVar("E", bound=enum.StrEnum)


class RunStatus(enum.StrEnum):
    """Where a run is. A *live* run (any but the terminal ones) owns its task_id."""

    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"  # suspended on a wait or timer: no lease, no worker
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INCOMPATIBLE = "incompatible_checkpoint"
    OUTCOME_UNKNOWN = "outcome_unknown"
    # Paused on a decision about its intent (a policy's Pause, an expired
    # grant, an exhausted budget): a person resumes or terminates it.
    PAUSED = "paused"
    # Terminated by its policy or a person on revalidation: never retried.
    REVALIDATION_FAILED = "revalidation_failed"


TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED,
                      RunStatus.REVALIDATION_FAILED})
# Stopped for a human: live (the task stays owned) but no worker may claim it.
STOPPED = frozenset({RunStatus.INCOMPATIBLE, RunStatus.OUTCOME_UNKNOWN, RunStatus.PAUSED})


class RecordKind(enum.StrEnum):
    """What call a journal record is of."""

    STEP = "step"
    LLM = "llm"
    NOW = "now"
    UUID = "uuid"
    RANDOM = "random"
    EFFECT = "effect"
    WAIT = "wait"
    SLEEP = "sleep"
    STATE = "state"
    INTENT = "intent"  # `run.intent(...)`: a new intent version declared by the workflow
    # The journal from `from_seq` on is no longer replayed (kept, never
    # deleted): a `fresh` call is asked again after a revalidation.
    CUT = "cut"
    # The span context of an execution attempt, journaled with its first
    # write when tracing is on (see `stead.tracing`); never replayed.
    TRACE = "trace"
    # A directory attached to the run (`run.workspace`) and its snapshots (`ws.save()`).
    WORKSPACE = "workspace"
    # The environment a `fresh=stead.Fingerprint(...)` step's result was made in.
    FINGERPRINT = "fingerprint"
    # `run.child(...)`: the child's id when it started (open), then its
    # outcome once it ended (ok, or error with its status and error).
    CHILD = "child"
    # A policy's decision before a live effect or model call, with the action
    # it judged (see `stead.policy`): the audit of it; never replayed.
    DECISION = "decision"


KINDS = frozenset(RecordKind)


class RecordStatus(enum.StrEnum):
    """The phase a journal record says its call reached."""

    OK = "ok"
    ERROR = "error"
    # A step or model call began this attempt. Rides along with the next
    # commit made while the call is in flight (never a commit of its own), so
    # an attempt whose worker died mid-call is counted on takeover.
    STARTED = "started"
    # An effect's phases besides ok/error (see effects.py).
    INTENT = "intent"
    ACCEPTED = "accepted"
    UNKNOWN = "unknown"
    RECONCILED = "reconciled"
    # A wait's: opened, then resolved by an event (ok), expiry or revocation.
    OPEN = "open"
    EXPIRED = "expired"
    REVOKED = "revoked"


RECORD_STATUSES = frozenset(RecordStatus)


# The bind key that ties a wait to the policy version it opened under: a
# delivery is compared with the version the live workers run (`WaitRow`).
POLICY_VERSION_KEY = "policy_version"


class WaitState(enum.StrEnum):
    """Where a stored wait is: open until an event consumes it, it expires or it
    is revoked."""

    OPEN = "open"
    CONSUMED = "consumed"
    EXPIRED = "expired"
    REVOKED = "revoked"


class Verdict(enum.StrEnum):
    """The judgement on a delivered event."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    DUPLICATE = "duplicate"


class RejectReason(enum.StrEnum):
    """Why a delivered event was rejected (see `waits.judge`)."""

    UNKNOWN_RUN = "unknown_run"
    NOT_WAITING = "not_waiting"
    WRONG_EVENT_TYPE = "wrong_event_type"
    WRONG_WAIT = "wrong_wait"
    BOUND_VALUE_MISMATCH = "bound_value_mismatch"
    STATE_VERSION_MOVED = "state_version_moved"
    # The wait bound a policy version; the delivering app's policy is another.
    POLICY_CHANGED = "policy_changed"
    EXPIRED = "expired"
    REVOKED = "revoked"
    ALREADY_CONSUMED = "already_consumed"
    BAD_TOKEN = "bad_token"
    WAIT_LOCKED = "wait_locked"  # too many bad tokens: refused until unlocked or revoked
    INVALID_PAYLOAD = "invalid_payload"


# Rejections that anyone can provoke without knowing a run and its token: such
# an event is stored as a bounded digest of its payload, never in full.
UNAUTHENTICATED = frozenset({RejectReason.UNKNOWN_RUN, RejectReason.BAD_TOKEN,
                             RejectReason.WAIT_LOCKED})


class ResumeClass(enum.StrEnum):
    """How a takeover treats a journaled call; the resume record counts each."""

    REUSE = "reuse"  # an acknowledged outcome: returned from the journal
    NOT_STARTED = "not_started"  # an effect with no intent journaled: sent
    PENDING_EXTERNAL = "pending_external"  # accepted outside, no result: `check` is asked
    OUTCOME_UNKNOWN = "outcome_unknown"  # an intent and no outcome: resent, asked, or stopped
    REVALIDATE = "revalidate"  # a `fresh` proposal after a changed intent: asked again


class StaleCause(enum.StrEnum):
    """Why a takeover found a journaled result no longer holding."""

    FINGERPRINT = "fingerprint"  # the environment it was made in changed
    PROPOSAL = "proposal"  # a `fresh=` proposal after a changed intent
    CODE = "code"  # the step's body changed (see `stead.stepcode`)


class StaleOutcome(enum.StrEnum):
    """What a takeover did with a result no longer holding."""

    RERUN = "rerun"  # cut from there: made again
    PAUSED = "paused"  # something acted after it: the run paused for a person
    REUSED = "reused"  # reused as journaled, with a warning
    STOPPED = "stopped"  # the run stopped as incompatible_checkpoint


class LineageKind(enum.StrEnum):
    """How a run came from another (see `Link`)."""

    FORK = "fork"  # `Client.fork`: a copy of the parent's journal prefix
    CONTINUED = "continued"  # `run.continue_as_new`: the parent's successor


class Boundary(enum.StrEnum):
    """Where the crash matrix (`stead.testing`) kills a worker."""

    NONE = "none"  # the reference run: no crash
    BEFORE = "before"  # just before a journal write commits
    AFTER = "after"  # just after it committed
    IN_SEND = "in_send"  # inside an effect's function: its intent committed, no outcome yet
    WAITING = "waiting"  # while the run is suspended; its event comes while no worker runs
    DELIVERY = "delivery"  # as the worker wakes for a delivered event


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One acknowledged call (or one attempt of it). `payload` is JSON text:
    the result when `status` is ok, `{"type", "message", "retry_at"}` when error."""

    seq: int
    addr: str
    attempt: int
    kind: RecordKind
    name: str
    digest: str
    status: RecordStatus
    payload: str
    epoch: int
    at: float

    def evolve(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)

    def numbered(self, seq: int) -> Record:
        """This record at `seq` (what every write does to every record: spelled
        out, because `dataclasses.replace` costs ~10 µs a call)."""
        return Record(seq, self.addr, self.attempt, self.kind, self.name, self.digest,
                      self.status, self.payload, self.epoch, self.at)


@dataclasses.dataclass(frozen=True, slots=True)
class RunRow:
    run_id: str
    workflow: str
    version: int
    task_id: str | None
    status: RunStatus
    input: str
    result: str | None
    error: str | None
    epoch: int
    lease_owner: str | None
    lease_expires_at: float | None
    created_at: float
    updated_at: float
    wake_at: float | None = None
    intent_version: int = 0  # the intent version in force; 0: the run has none
    parent_id: str | None = None  # the run that started this one with `run.child`
    deadline: float | None = None  # when the run fails if it has not ended
    cancel_requested: float | None = None  # when a cancel was asked of its holder
    queue: str | None = None  # claimed only under this queue's limits
    priority: int = 0  # in its queue: lower is claimed first
    dedup_key: str | None = None  # unique among its queue's live runs
    started_at: float | None = None  # its first claim (a queue's rate counts these)
    # JSON: the started markers of the calls its holder had in flight, not yet
    # journaled, at its last lease renewal (see `stead.replay.markers_from`).
    in_flight: str | None = None

    @property
    def live(self) -> bool:
        return self.status not in TERMINAL

    def evolve(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True, slots=True)
class IntentRow:
    """One version of a run's intent: `intent` is its JSON text (see
    `stead.intent`), `author` and `why` say who changed it and why."""

    run_id: str
    version: int
    intent: str
    author: str
    why: str
    at: float


@dataclasses.dataclass(frozen=True, slots=True)
class NewRun:
    run_id: str
    workflow: str
    version: int
    task_id: str | None
    input: str
    # The run's intent (JSON text), stored as its version 1 with the run.
    intent: str | None = None
    intent_why: str = "given at start"
    intent_by: str = "client"  # who gave it (`Client.start`: the OS user)
    parent_id: str | None = None
    deadline: float | None = None
    # The queue it is claimed under, its priority there (lower first) and a
    # key that returns the queue's live run holding it instead of a new run.
    queue: str | None = None
    priority: int = 0
    dedup_key: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Link:
    """Run `run_id` came from run `parent_id`: a fork of its journal's first
    `at_seq` records, or its successor (`continued`, `at_seq` the parent's
    journal length when it ended)."""

    run_id: str
    parent_id: str
    kind: LineageKind
    at_seq: int
    created_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class Lineage:
    """Where a run came from (`parent`: None for a run started by a client)
    and the runs that came from it (`children`: its forks and its successor,
    oldest first)."""

    parent: Link | None
    children: tuple[Link, ...]

    @property
    def successor(self) -> str | None:
        """The run that continued this one (`run.continue_as_new`), if any."""
        return next((c.run_id for c in self.children if c.kind == LineageKind.CONTINUED), None)


@dataclasses.dataclass(frozen=True, slots=True)
class NewFork:
    """A fork to create: the run `new` with the first `at_seq` records of run
    `parent_id`'s journal (`records`, as the fork replays them), its open
    `waits`, and the task state its prefix last saw (`state`, under the
    fork's own task key; None: nothing to copy)."""

    new: NewRun
    parent_id: str
    at_seq: int
    records: tuple[Record, ...]
    waits: tuple[WaitRow, ...]
    state: StateRow | None


@dataclasses.dataclass(frozen=True, slots=True)
class Fence:
    """What a write must prove: this worker still holds this run at this epoch."""

    run_id: str
    epoch: int
    worker_id: str


class EffectReplay(enum.StrEnum):
    """What a takeover's replay did with an effect it met (see `ResumeDetails.effects`)."""

    REUSED = "reused"  # its outcome was journaled: returned
    POLLED = "polled"  # accepted outside: its check asked with the external id
    RESENT = "resent"  # outcome unknown, idempotent: sent again with the same key
    CHECKED = "checked"  # outcome unknown: its check asked
    LEFT_UNKNOWN = "left unknown"  # outcome unknown, nothing to ask: the run stops


@dataclasses.dataclass(frozen=True, slots=True)
class ResumeDetails:
    """What a takeover found, typed: how many records the journal held, and
    how many replayed calls fell in each `ResumeClass` and were of each
    `RecordKind` by the time the resume record was written."""

    journal_records: int
    classes: Mapping[ResumeClass, int]
    kinds: Mapping[RecordKind, int]
    # The revalidation of the run's intent at this takeover: `snapshot` (what
    # it ran under), `diff` (what changed since the last), `decision` (the
    # policy's, with its reason and version). None for a run without intent
    # or policy.
    intent: Mapping[str, Any] | None = None
    # A migration or its rollback this resume record audits: who, when,
    # from which version to which, and the journal's length before and after.
    migration: Mapping[str, Any] | None = None
    # The workspaces restored before replay, by name: the snapshot (its
    # journal seq, tree hash, epoch) and the fresh directory it went into.
    workspaces: Mapping[str, Any] | None = None
    # What replay did with each effect it met before the record was written:
    # `{"name", "addr", "done": reused | polled | resent | checked | left
    # unknown, "key"?, "external_id"?}`, in the order met.
    effects: Sequence[Mapping[str, Any]] | None = None
    # Each journaled result replay found no longer holding, in the order met:
    # `{"call", "seq", "cause": fingerprint | proposal, "changed": ["part: old
    # -> new", ...], "done": rerun | paused}`.
    reran: Sequence[Mapping[str, Any]] | None = None

    @classmethod
    def from_json(cls, text: str) -> ResumeDetails:
        """Read a resume record's `detail`; keys it lacks (older rows) count zero."""
        try:
            data = json.loads(text)
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        return cls(
            journal_records=int(data.get("journal_records", 0)),
            classes=_counts(data.get("classes"), ResumeClass),
            kinds=_counts(data.get("kinds"), RecordKind),
            intent=data["intent"] if isinstance(data.get("intent"), dict) else None,
            migration=data["migration"] if isinstance(data.get("migration"), dict) else None,
            workspaces=data["workspaces"] if isinstance(data.get("workspaces"), dict) else None,
            effects=[e for e in data["effects"] if isinstance(e, dict)]
            if isinstance(data.get("effects"), list) else None,
            reran=[e for e in data["reran"] if isinstance(e, dict)]
            if isinstance(data.get("reran"), list) else None,
        )

    def to_json(self) -> str:
        data: dict[str, Any] = {"journal_records": self.journal_records,
                                "classes": dict(self.classes), "kinds": dict(self.kinds)}
        if self.intent is not None:
            data["intent"] = dict(self.intent)
        if self.migration is not None:
            data["migration"] = dict(self.migration)
        if self.workspaces is not None:
            data["workspaces"] = dict(self.workspaces)
        if self.effects:
            data["effects"] = [dict(e) for e in self.effects]
        if self.reran:
            data["reran"] = [dict(e) for e in self.reran]
        return json.dumps(data)


def _counts(data: object, members: type[E]) -> dict[E, int]:
    if not isinstance(data, dict):
        return {}
    known = {m.value: m for m in members}
    return {known[k]: int(v) for k, v in data.items() if k in known}


@dataclasses.dataclass(frozen=True, slots=True)
class ResumeRecord:
    """The audit of one takeover, written with the first write after replay.
    `detail` is the stored JSON text; `details` reads it as `ResumeDetails`."""

    run_id: str
    epoch: int
    worker_id: str
    at: float
    from_seq: int
    code_version: str
    reused: int
    detail: str = "{}"

    @property
    def details(self) -> ResumeDetails:
        return ResumeDetails.from_json(self.detail)


@dataclasses.dataclass(frozen=True, slots=True)
class UnknownOutcome:
    """Why a run stopped as `outcome_unknown`: the effect (`name`, its
    idempotency `key`, its `addr` in the workflow, the `attempt`), the
    `arguments` it was sent with, and what is `known` of its outcome. Decide
    it with `Client.reconcile` (or `stead reconcile`)."""

    name: str
    key: str
    addr: str
    attempt: int
    known: str
    arguments: Any = None

    @classmethod
    def from_error(cls, error: Mapping[str, Any]) -> UnknownOutcome | None:
        """Read the stop from a run's error; None if it names no effect."""
        if "effect" not in error or "key" not in error:
            return None
        return cls(
            name=str(error["effect"]), key=str(error["key"]), addr=str(error.get("addr", "")),
            attempt=int(error.get("attempt", 0)), known=str(error.get("known", "")),
            arguments=error.get("arguments"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class WaitRow:
    """A durable wait. `bind` and `schema` are JSON text; only the token's
    hash is kept (None when the wait takes no token). `bad_tokens` counts the
    deliveries refused for a wrong token; past the limit the wait is locked
    (`locked_at`): it stays open, but refuses every event until it is unlocked
    or revoked."""

    wait_id: str
    run_id: str
    addr: str
    kind: str
    bind: str
    schema: str | None
    token_hash: str | None
    task_key: str
    expires_at: float | None
    state: WaitState
    event_id: str | None
    created_at: float
    closed_at: float | None = None
    bad_tokens: int = 0
    locked_at: float | None = None
    # The app's policy version when the wait opened (the bound value, for a
    # wait bound to `policy_version`); None: it had no policy.
    policy_version: str | None = None

    def evolve(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)

    @property
    def policy_bound(self) -> bool:
        """Whether a delivery must find the policy it opened under still in
        force (it is bound to `policy_version`)."""
        bound = json.loads(self.bind)
        return isinstance(bound, dict) and POLICY_VERSION_KEY in bound


@dataclasses.dataclass(frozen=True, slots=True)
class EventRow:
    """A delivered event as stored, with its verdict (accepted or rejected, with
    the reason), and for an operator's delivery who made it and why. `verdict`
    is None only on the event handed to `Store.deliver`: the store stamps the
    judgement's verdict, reason and detail, and the time."""

    run_id: str
    event_id: str
    wait_id: str | None
    kind: str | None
    payload: str
    bind: str
    verdict: Verdict | None
    reason: RejectReason | None
    detail: str | None
    received_at: float
    # An operator's delivery (the dashboard, a webhook signed with stead's
    # key) instead of the wait's token: who vouched for it, and why.
    delivered_by: str | None = None
    delivered_why: str | None = None


class ActionOutcome(enum.StrEnum):
    """What became of an operator's action."""

    DONE = "done"
    REFUSED = "refused"  # the run moved on, or the store refused it: `detail` says why


@dataclasses.dataclass(frozen=True, slots=True)
class ActionRow:
    """One operator action on a run, as audited: which `action` on which
    `target` (a wait, an effect, a tool; empty for the run itself), who
    (`author`) and why, and its outcome with the message it gave."""

    action_id: str
    run_id: str
    action: str
    target: str
    author: str
    why: str
    outcome: ActionOutcome
    detail: str
    at: float


@dataclasses.dataclass(frozen=True, slots=True)
class DeliveryContext:
    """What a delivery is judged on, read inside its transaction."""

    run: RunRow | None
    waits: tuple[WaitRow, ...]
    state_versions: dict[str, int]
    existing: EventRow | None
    now: float
    # The policy versions (None: no policy) the live workers serving the
    # run's `workflow@version` run; empty: none is live (or none was asked).
    live_policies: frozenset[str | None] = frozenset()


@dataclasses.dataclass(frozen=True, slots=True)
class Judgement:
    """The verdict on one event: `accepted` (consuming `wait_id`), `rejected`
    (with `reason`) or `duplicate` (an event with that id is already stored).
    A bad token is counted on its wait; `locks_wait` locks the wait too."""

    verdict: Verdict
    wait_id: str | None = None
    reason: RejectReason | None = None
    detail: str | None = None
    locks_wait: bool = False


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


@dataclasses.dataclass(frozen=True, slots=True)
class StateRow:
    task_key: str
    version: int
    data: str
    run_id: str | None
    updated_at: float | None
    # Who changed it from outside any run, and why (`Client.set_state`);
    # None for a run's own change (`run_id` says which run).
    author: str | None = None
    why: str | None = None


class FindingKind(enum.StrEnum):
    """Why a dry replay (`stead replay-check`) says the code cannot interpret a run."""

    INCOMPATIBLE = "incompatible"  # the code calls something else than the journal says
    UNHOSTED = "unhosted"  # the app neither hosts the run's version nor migrates it
    MIGRATION = "migration"  # the migration that would move it is refused
    CORRUPT = "corrupt"  # the history cannot be read


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


@dataclasses.dataclass(frozen=True, slots=True)
class MigrationRow:
    """One migration applied to a run: from which version to which, the
    input before and after, the journal's length before and after, who and
    when (and at which epoch); `rolled_back_at`/`_by` once undone."""

    run_id: str
    number: int
    from_version: int
    to_version: int
    old_input: str
    new_input: str
    records_before: int
    records_after: int
    author: str
    at: float
    epoch: int
    rolled_back_at: float | None = None
    rolled_back_by: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class MigrationPlan:
    """What a migration writes: the run's new version and input, and the
    journal the new code replays (numbered from 0). `old_input` and
    `records_before` are what it was made from: if the run moved since, the
    store refuses it."""

    run_id: str
    from_version: int
    to_version: int
    old_input: str
    new_input: str
    records_before: int
    records: tuple[Record, ...]
    author: str


@dataclasses.dataclass(frozen=True, slots=True)
class SnapshotRow:
    """One durable snapshot of a run's workspace `name`, saved by the journal
    record at `seq`. `manifest` is the JSON list of its entries (see
    `stead.trees`), `tree` their sha256; `git` (JSON, or None) the commit,
    the uncommitted patch's blob and the untracked files of a git tree.
    `blobs` is where the file contents are: None for this database's
    `workspace_blobs` table, else an fsspec URL. `stored_bytes` counts the
    blob bytes this save added (the rest were stored already)."""

    run_id: str
    name: str
    seq: int
    epoch: int
    worker_id: str
    tree: str
    manifest: str
    git: str | None
    files: int
    bytes: int
    stored_bytes: int
    blobs: str | None
    source: str
    at: float

    def evolve(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)


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
class RunExport:
    """Everything stored of one run, as retention exports it before deleting."""

    run: RunRow
    journal: tuple[Record, ...]
    resumes: tuple[ResumeRecord, ...]
    waits: tuple[WaitRow, ...]
    events: tuple[EventRow, ...]
    intents: tuple[IntentRow, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "run": dataclasses.asdict(self.run),
            "journal": [dataclasses.asdict(r) for r in self.journal],
            "resumes": [dataclasses.asdict(r) for r in self.resumes],
            "waits": [dataclasses.asdict(w) for w in self.waits],
            "events": [dataclasses.asdict(e) for e in self.events],
            "intents": [dataclasses.asdict(i) for i in self.intents],
        }


def task_taken(new: NewRun, owner: RunRow) -> str:
    """Why `new` cannot start: a live run of another workflow owns its task."""
    return (f"task {new.task_id!r} already has a live run {owner.run_id} of workflow "
            f"{owner.workflow!r}; cancel it before starting {new.workflow!r} for that task")
