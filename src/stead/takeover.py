"""The takeover pipeline (see docs/architecture.md), one small function per stage.

    claim (worker.py) → version gate → load checkpoint → revalidate → replay
    → resume record

`prepare` runs the stages between the claim and replay. Revalidation runs
only for a run with an intent or under an app with a policy: the policy is
asked about the intent in force (at every claim: a takeover, a wake), and the
resume record carries the intent diff and the decision, also when the run
stops there. Replay is the workflow
re-executing against the journal (`run.py`), which classifies each journaled
call as it meets it (an effect's phases in `effects.py`); the resume record,
counting those classes, rides along with the first write after it
(`execution.py`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from stead import codec, errors, guard, inputs, policy
from stead.app import App, Workflow
from stead.clock import Clock
from stead.execution import Execution, ExecutionOptions, Stop
from stead.intent import Intent
from stead.policy import Continue
from stead.records import Fence, IntentRow, ResumeDetails, ResumeRecord, RunRow, RunStatus
from stead.replay import Journal
from stead.store.base import Store
from stead.store.seam import FencedWrite


@dataclasses.dataclass(frozen=True)
class Stopped:
    """The pipeline decided the run cannot continue here, and why."""

    status: RunStatus
    reason: str
    # The takeover's audit, written in the same fenced write that stops the
    # run: the decision "stopped: <status>" with the reason.
    resume: ResumeRecord | None = None


@dataclasses.dataclass(frozen=True)
class Ready:
    workflow: Workflow[Any, Any]
    execution: Execution
    args: list[Any]
    kwargs: dict[str, Any]
    # The revalidation stopped the run: the worker ends the attempt so (the
    # resume record rides along), without running the workflow.
    stop: Stop | None = None


def version_gate(app: App, row: RunRow) -> Workflow[Any, Any] | Stopped:
    """The run continues only on the exact workflow version it started on."""
    try:
        return app.get(row.workflow, row.version)
    except errors.UnknownWorkflow as exc:
        # Claims only take hosted versions, so this means the app changed
        # between claim and gate: leave the run for a worker that hosts it.
        return Stopped(RunStatus.PENDING, str(exc))


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


async def revalidate(
    app: App, store: Store, row: RunRow, x: Execution, ctx: guard.Guard,
    first: IntentRow | None, last: ResumeRecord | None,
) -> Stop | None:
    """Ask the policy about the intent in force, store a revision it makes,
    and set what the resume record says: the intent diff since the last
    takeover and the decision. Returns what stops the run, if anything."""
    now = x.clock.now()
    state: dict[str, Any] = {}
    if ctx.policy is not None:
        found = await store.read_state(ctx.task_key)
        state = {} if found is None else codec.loads(found.data)
    decision, version = await ctx.decide(state, None)
    if isinstance(decision, Continue) and decision.intent is not None:
        text = decision.intent.anchored(now).dumps()
        revised, _ = await store.revise_intent(
            row.run_id, lambda _current, _run: text, author=f"policy {version}",
            why=decision.reason or "revised by the policy",
            write=FencedWrite(x.fence, (), None))
        ctx.adopt(revised)
    before = None
    if last is not None:
        before = (ResumeDetails.from_json(last.detail).intent or {}).get("snapshot")
    if before is None and first is not None:
        before = policy.snapshot(Intent.loads(first.intent), first.version, None, first.at)
    after = policy.snapshot(ctx.intent, ctx.version, version, now)
    change = policy.diff(before, after)
    budget = ctx.budget_left()
    if budget is not None:
        change["budget"] = budget
    x.intent_changed = policy.changed(change)
    x.revalidation = {"snapshot": after, "diff": change,
                      "decision": policy.decision_json(decision, version or "")}
    halt = guard.halted(decision, version or "", None)
    if halt is None:
        return None
    return Stop(halt.status, {**halt.error, "diff": change})


def stopped(row: RunRow, worker_id: str, at: float, code_version: str, from_seq: int,
            status: RunStatus, reason: str) -> Stopped:
    """A stop before replay, carrying its resume record."""
    decision = {"decision": f"stopped: {status}", "reason": reason, "policy_version": None}
    detail = ResumeDetails(from_seq, {}, {}, {"decision": decision})
    resume = ResumeRecord(
        run_id=row.run_id, epoch=row.epoch, worker_id=worker_id, at=at, from_seq=from_seq,
        code_version=code_version, reused=0, detail=detail.to_json())
    return Stopped(status, reason, resume)


async def prepare(
    app: App, store: Store, clock: Clock, row: RunRow, worker_id: str,
    options: ExecutionOptions,
) -> Ready | Stopped:
    """Everything between the claim and the first replayed call."""
    gated = version_gate(app, row)
    if isinstance(gated, Stopped):
        return gated
    # A run without intent under an app without policy has nothing to revalidate.
    checked = app.current_policy is not None or row.intent_version > 0
    first: IntentRow | None = None
    intent: IntentRow | None = None
    last: ResumeRecord | None = None
    journal: Journal | None = None
    try:
        # Epoch 1 is a run's first claim ever (every claim, retry and cancel
        # bumps it): no one has journaled anything yet, so skip the round trip.
        if checked:
            recorded, intents, last = await store.takeover_context(
                row.run_id, journal=row.epoch > 1)
            first, intent = (intents[0], intents[-1]) if intents else (None, None)
        else:
            recorded = await store.load_journal(row.run_id) if row.epoch > 1 else []
        journal = Journal(row.run_id, recorded)
        args, kwargs = decode_input(gated, row)
    except errors.CorruptRecord as exc:
        seq = 0 if journal is None else journal.length
        return stopped(row, worker_id, clock.now(), gated.key, seq, RunStatus.INCOMPATIBLE,
                       str(exc))
    execution = Execution(
        store=store,
        fence=Fence(row.run_id, row.epoch, worker_id),
        journal=journal,
        clock=clock,
        code_version=gated.key,
        takeover=row.epoch > 1 or journal.length > 0,
        options=options,
    )
    execution.matchers = app.matchers
    execution.deadline = row.deadline
    if row.cancel_requested is not None:
        execution.request_cancel()
    execution.tools, execution.app_name = app.tools, app.name
    if not checked:
        return Ready(gated, execution, args, kwargs)
    try:
        ctx = guard.Guard(row, intent, app.current_policy, guard.Ledger())
    except errors.InvalidIntent as exc:
        return stopped(row, worker_id, clock.now(), gated.key, journal.length,
                       RunStatus.INCOMPATIBLE,
                       f"run {row.run_id}: its stored intent is corrupt ({exc}); "
                       "repair or cancel it")
    ctx.ledger.count(recorded)
    execution.guard = ctx
    stop = await revalidate(app, store, row, execution, ctx, first, last)
    return Ready(gated, execution, args, kwargs, stop)
