"""The takeover pipeline (see docs/architecture.md), one small function per stage.

    claim (`stead.worker`) → version gate [→ migrate] → load checkpoint → diff
    → replay → the policy judges the first live action → resume record

The version gate continues a run on the version it started on when the app
hosts it; otherwise, if the app registers migrations that lead from it to a
version it hosts, the run is migrated (its old journal archived, the
migration recorded and carried by the resume record) and continues there; a
migration that is refused stops the run as `incompatible_checkpoint`, saying
why. `plan_from` is the same step for `Client.migrate` and the dry replays of
`stead.dryrun`.

`prepare` runs the stages between the claim and replay. Revalidation runs
only for a run with an intent or under an app with a policy, at every claim
(the first, a takeover, a wake): the diff since the last one is made before
replay, and the policy is asked about the step the run is about to take
where it first acts live (`stead.workflow.revalidation`); the resume record carries
the diff, the action and the decision, also when the run stops there.
Replay is the workflow
re-executing against the journal (`stead.run`), which classifies each journaled
call as it meets it (an effect's phases in `stead.workflow.effects`); the resume record,
counting those classes, rides along with the first write after it
(`stead.execution`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stead import codec, errors, inputs, worlds
from stead.app import App, Workflow
from stead.execution import Execution, ExecutionOptions
from stead.records import Fence, Record, RecordKind, ResumeDetails, ResumeRecord, RunRow, RunStatus
from stead.replay import Journal, markers_from

# What only a migration, a run with an intent or a policy, or a run with a
# workspace needs is imported on that path: a worker's first claim of any
# other run loads none of it.
if TYPE_CHECKING:
    from stead import guard
    from stead.clock import Clock
    from stead.exports import StoredRun
    from stead.migrations import Migration, MigrationView
    from stead.records import (
        EventRow,
        IntentRow,
        MigrationPlan,
        MigrationRow,
        StateRow,
        WaitRow,
    )
    from stead.store.base import Store
    from stead.workflow import revalidation


@dataclasses.dataclass(frozen=True)
class Stopped:
    """The pipeline decided the run cannot continue here, and why."""

    status: RunStatus
    reason: str
    # The takeover's audit, written in the same fenced write that stops the
    # run: the decision "stopped: <status>" with the reason.
    resume: ResumeRecord | None = None
    error_type: str = "CorruptRecord"


@dataclasses.dataclass(frozen=True)
class Ready:
    workflow: Workflow[Any, Any]
    execution: Execution
    args: list[Any]
    kwargs: dict[str, Any]


def version_gate(app: App, row: RunRow) -> Workflow[Any, Any] | Stopped:
    """The run continues on the exact workflow version it is on, if the app
    hosts it. If not, `prepare` migrates it when the app can (a worker claims
    such versions only then); otherwise the app changed between claim and
    gate: the run is left for a worker that hosts it."""
    try:
        return app.get(row.workflow, row.version)
    except errors.UnknownWorkflow as exc:
        return Stopped(RunStatus.PENDING, str(exc))


def task_key(row: RunRow) -> str:
    return row.task_key


async def load_stored(store: Store, row: RunRow) -> StoredRun:
    """The run as stored now: its journal, waits and task state."""
    from stead.exports import StoredRun

    journal = await store.load_journal(row.run_id)
    waits = await store.list_waits(run_id=row.run_id, limit=10_000)
    state = await store.read_state(task_key(row))
    return StoredRun(row, tuple(journal), tuple(waits), state)


def view_of(stored: StoredRun, migration: Migration) -> MigrationView:
    """What `migration` sees of the run."""
    from stead.migrations import MigrationView
    from stead.records import WaitState

    row = stored.run
    try:
        args, kwargs = inputs.decode(row.input)
    except (ValueError, KeyError, TypeError) as exc:
        raise errors.MigrationRefused(
            f"run {row.run_id}: its stored input is corrupt ({exc}); nothing to migrate"
        ) from exc
    state = stored.state
    return MigrationView(
        run_id=row.run_id, workflow=row.workflow, from_version=migration.from_version,
        to_version=migration.to_version, task_id=row.task_id, args=tuple(args),
        kwargs=kwargs, records=stored.journal,
        state=None if state is None else codec.loads(state.data),
        state_version=0 if state is None else state.version,
        open_waits=tuple(w for w in stored.waits if w.state == WaitState.OPEN))


def plan_from(app: App, stored: StoredRun, migration: Migration, author: str) -> MigrationPlan:
    """Run `migration` on the run and check what it made: the journal (no
    effect record lost) and, if the app hosts the target version, the new
    input against its parameters. `MigrationRefused` says what is wrong;
    nothing is written here."""
    from stead import migrations
    from stead.records import MigrationPlan

    row = stored.run
    view = view_of(stored, migration)
    made = migration(view)
    records = migrations.new_journal(migration, view, made)
    try:
        new_input = inputs.encode(list(made.args), dict(made.kwargs), workflow=row.workflow)
    except errors.SerializationError as exc:
        raise errors.MigrationRefused(f"migration {migration.source} -> {migration.target}: "
                                      f"{exc}") from exc
    try:
        target = app.get(row.workflow, migration.to_version)
    except errors.UnknownWorkflow:
        target = None  # a step of a longer path: the last one is checked
    if target is not None:
        try:
            inputs.bind(target, *inputs.decode(new_input))
        except (TypeError, ValueError) as exc:
            raise errors.MigrationRefused(
                f"migration {migration.source} -> {migration.target} made an input that does "
                f"not fit {target.key} ({codec.describe(exc)}); nothing changed") from exc
    return MigrationPlan(row.run_id, migration.from_version, migration.to_version, row.input,
                         new_input, len(view.records), records, author)


def planned(stored: StoredRun, plan: MigrationPlan) -> StoredRun:
    """The run as it is once `plan` is applied (nothing is written)."""
    return dataclasses.replace(
        stored, run=stored.run.evolve(version=plan.to_version, input=plan.new_input),
        journal=plan.records)


def migration_audit(applied: list[MigrationRow]) -> dict[str, Any]:
    """What a resume record says of the migrations a takeover applied."""
    return {"applied": [{"number": m.number, "from_version": m.from_version,
                         "to_version": m.to_version, "by": m.author, "at": m.at,
                         "records_before": m.records_before,
                         "records_after": m.records_after} for m in applied]}


async def migrate(app: App, store: Store, row: RunRow, worker_id: str,
                  path: list[Migration]) -> tuple[RunRow, tuple[Record, ...], list[MigrationRow]]:
    """Apply `path` to the run this worker holds, one migration (and one
    transaction) after the other."""
    applied: list[MigrationRow] = []
    records: tuple[Record, ...] = ()
    for migration in path:
        plan = plan_from(app, await load_stored(store, row), migration, f"worker {worker_id}")
        row, made = await store.migrate_run(plan, fence=Fence(row.run_id, row.epoch, worker_id))
        applied.append(made)
        records = plan.records
    return row, records, applied


def decode_input(wf: Workflow[Any, Any], row: RunRow) -> tuple[list[Any], dict[str, Any]]:
    try:
        args, kwargs = inputs.decode(row.input)
    except (ValueError, KeyError, TypeError) as exc:
        raise errors.CorruptRecord(
            f"run {row.run_id}: its stored input is corrupt ({exc}); repair or cancel it"
        ) from exc
    try:
        # An input that does not fit the parameters would fail every attempt
        # the same way: stop the run for a human instead of retrying forever.
        return inputs.bind(wf, args, kwargs)
    except (ValueError, TypeError) as exc:
        raise errors.CorruptRecord(
            f"run {row.run_id}: its stored input does not fit the parameters of "
            f"{wf.key} ({exc}); cancel it and start it again with valid arguments"
        ) from exc


def revalidation_for(
    app: App, store: Store, x: Execution, ctx: guard.Guard, recorded: Sequence[Record],
    intents: Sequence[IntentRow], last: ResumeRecord | None, state: StateRow | None,
) -> revalidation.Revalidation:
    """The takeover's revalidation: the diff since the last one now (it
    decides whether a `fresh` proposal is asked again); the policy is asked
    where the run first acts live (`Execution.judge`)."""
    from stead.workflow import revalidation

    before = revalidation.baseline(intents[0] if intents else None, last)
    ctx.cleared = revalidation.cleared_pause(last, recorded, intents)
    registered = None if app.current_policy is None else app.current_policy.version
    return revalidation.Revalidation(store, x, ctx, before, state,
                                     revalidation.seen_world(before, recorded), registered)


def stopped(row: RunRow, worker_id: str, at: float, code_version: str, from_seq: int,
            status: RunStatus, reason: str, error_type: str = "CorruptRecord",
            world: dict[str, Any] | None = None) -> Stopped:
    """A stop before replay, carrying its resume record (with the task state
    the takeover read, if it got that far)."""
    decision = {"decision": f"stopped: {status}", "reason": reason, "policy_version": None}
    detail = ResumeDetails(from_seq, {}, {}, {"decision": decision}, world=world,
                           claimed_at=row.updated_at)
    resume = ResumeRecord(
        run_id=row.run_id, epoch=row.epoch, worker_id=worker_id, at=at, from_seq=from_seq,
        code_version=code_version, reused=0, detail=detail.to_json())
    return Stopped(status, reason, resume, error_type)


async def prepare(
    app: App, store: Store, clock: Clock, row: RunRow, worker_id: str,
    options: ExecutionOptions,
) -> Ready | Stopped:
    """Everything between the claim and the first replayed call."""
    gated = version_gate(app, row)
    migrated: tuple[Record, ...] | None = None
    audit: dict[str, Any] | None = None
    if isinstance(gated, Stopped):
        path = app.migrations_path(row.workflow, row.version)
        if not path:
            return gated
        try:
            row, migrated, applied = await migrate(app, store, row, worker_id, path)
        except errors.MigrationRefused as exc:
            return stopped(row, worker_id, clock.now(), f"{row.workflow}@{row.version}", 0,
                           RunStatus.INCOMPATIBLE, str(exc), "MigrationRefused")
        audit = migration_audit(applied)
        gated = app.get(row.workflow, row.version)
    # A run without intent under an app without policy has nothing to revalidate.
    checked = app.current_policy is not None or row.intent_version > 0
    # Every claim writes a resume record but a plain run's first: the record
    # names the task state it resumed on, read with the journal.
    audited = row.epoch > 1 or migrated is not None or checked
    intents: Sequence[IntentRow] = []
    last: ResumeRecord | None = None
    state: StateRow | None = None
    consumed: tuple[WaitRow, EventRow | None] | None = None
    world: dict[str, Any] | None = None
    journal: Journal | None = None
    recorded: Sequence[Record] = []
    try:
        # Epoch 1 is a run's first claim ever (every claim, retry and cancel
        # bumps it): no one has journaled anything yet, so skip the round trip.
        load = row.epoch > 1 and migrated is None
        if audited:
            read = await store.takeover_context(row.run_id, journal=load, task_key=task_key(row),
                                                revalidate=checked)
            recorded, intents, last, state = read.journal, read.intents, read.last, read.state
            consumed = read.consumed
            world = worlds.of_state(state)
        if migrated is not None:
            recorded = list(migrated)
        journal = Journal(row.run_id, recorded)
        if load:  # a migrated journal is new: the markers name the old one's calls
            journal.mark_in_flight(markers_from(row.run_id, row.in_flight))
        args, kwargs = decode_input(gated, row)
    except errors.CorruptRecord as exc:
        seq = 0 if journal is None else journal.length
        return stopped(row, worker_id, clock.now(), gated.key, seq, RunStatus.INCOMPATIBLE,
                       str(exc), world=world)
    restored: dict[str, dict[str, Any]] = {}
    if any(r.kind == RecordKind.WORKSPACE for r in recorded):
        try:
            # Before replay: the workflow's calls see the files as they were saved.
            from stead.workflow import workspaces

            restored = await workspaces.restore_all(store, row.run_id, row.epoch, journal)
        except errors.WorkspaceError as exc:
            return stopped(row, worker_id, clock.now(), gated.key, journal.length,
                           RunStatus.INCOMPATIBLE, f"run {row.run_id}: {exc}",
                           type(exc).__name__, world)
    execution = Execution(
        store=store,
        fence=Fence(row.run_id, row.epoch, worker_id),
        journal=journal,
        clock=clock,
        code_version=gated.key,
        # A revalidated run's first claim has its resume record too.
        takeover=audited,
        options=options,
    )
    execution.migration = audit
    execution.world = world
    execution.claimed_at = row.updated_at
    execution.matchers = app.matchers
    execution.check_input = lambda text: inputs.check(gated, text)
    execution.restored = restored
    if consumed is not None:
        execution.consumed_waits[consumed[0].wait_id] = consumed
    execution.deadline = row.deadline
    if row.cancel_requested is not None:
        execution.request_cancel()
    execution.tools, execution.app_name = app.tools, app.name
    execution.changed_steps = app.changed_steps
    execution.keep_conversation = app.keep_conversation
    execution.policy_version = None if app.current_policy is None \
        else app.current_policy.version
    if not checked:
        return Ready(gated, execution, args, kwargs)
    from stead import guard

    try:
        ctx = guard.Guard(row, intents[-1] if intents else None, app.current_policy,
                          guard.Ledger())
    except errors.InvalidIntent as exc:
        return stopped(row, worker_id, clock.now(), gated.key, journal.length,
                       RunStatus.INCOMPATIBLE,
                       f"run {row.run_id}: its stored intent is corrupt ({exc}); "
                       "repair or cancel it", world=world)
    ctx.ledger.count(recorded)
    ctx.points = app.policy_on
    execution.guard = ctx
    execution.judge = revalidation_for(app, store, execution, ctx, recorded, intents, last,
                                       state)
    return Ready(gated, execution, args, kwargs)
