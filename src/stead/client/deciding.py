"""A person's decisions on a run from outside its worker: reconcile an effect
whose outcome is unknown, cancel, retry, resume or terminate a paused run,
revise its intent, renew or deny a grant, and change a task's state. Each is
stored with who decided and why."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from stead import bounds, codec, errors, records
from stead.client import revisions
from stead.client.base import MAX_ID_CHARS
from stead.client.info import RunInfo, loads
from stead.client.inspecting import Inspecting
from stead.intent import Grant, Intent
from stead.metrics import meters
from stead.metrics.meters import EffectOutcome
from stead.records import Record, RecordKind, RecordStatus, RunRow, RunStatus
from stead.store.transactions.payloads import Forgetting
from stead.workflow.state import Facts


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def _unknown_effect(journal: list[Record], run_id: str, effect: str) -> Record:
    """The last record of the effect named (or keyed) `effect` whose outcome is
    unknown: intent, accepted or unknown is its last phase."""
    last: dict[str, Record] = {}
    keys: dict[str, str] = {}
    for r in journal:
        if r.kind != RecordKind.EFFECT:
            continue
        last[r.addr] = r
        if r.status == RecordStatus.INTENT:
            keys[r.addr] = str(loads(r.payload, run_id).get("key", ""))
    # A reconciled effect is open again only while its run is stopped on it
    # (the decided result did not fit): resume_stopped checks that status.
    open_phases = (RecordStatus.INTENT, RecordStatus.ACCEPTED, RecordStatus.UNKNOWN,
                   RecordStatus.RECONCILED)
    found = [
        r for addr, r in last.items()
        if r.status in open_phases and effect in (r.name, keys.get(addr))
    ]
    if not found:
        raise errors.NotStopped(
            f"run {run_id} has no effect {effect!r} whose outcome is unknown"
        )
    if len(found) > 1:
        raise errors.SteadError(
            f"run {run_id} has {len(found)} effects named {effect!r} with unknown "
            f"outcomes; name one by its key: {', '.join(keys.get(r.addr, '?') for r in found)}"
        )
    return found[0]


# Stops that are stead's decision, not the workflow's: `retry` may undo them.
RETRYABLE = records.STOPPED - {RunStatus.PAUSED}  # a paused run is resumed, with who and why
# Failures that were the store's, not the workflow's (stead no longer fails a
# run for them: it leaves the run to be taken over).
_STORE_FAILURES = frozenset({"StoreError", "StoreUnavailable", "DatabaseMissing"})


def _failed_by_store(info: RunInfo) -> bool:
    return (info.status == RunStatus.FAILED and isinstance(info.error, dict)
            and info.error.get("type") in _STORE_FAILURES)



class Deciding(Inspecting):
    """How `Client` carries out a decision on a run, audited."""

    async def cancel(self, run_id: str) -> RunInfo:
        """Cancel a live run and its live child runs. A running run stops at
        its next call boundary (`RunInfo.cancel_requested` until then), in
        the worker that holds it or the one that takes it over, after an
        effect in flight has its outcome journaled; any other live run
        (pending, waiting, stopped for a person) is cancelled at once."""
        return RunInfo.from_row(await self.store.request_cancel(run_id))

    async def forget(self, task_id: str, *, why: str, by: str | None = None) -> Forgetting:
        """Forget every payload of task `task_id` (a customer asked to be
        erased): in one transaction its runs' inputs, results, journal
        values, events, stream entries, intents, wait requests and task state
        are overwritten, its live runs end (`RunForgotten` from then on for
        resume, retry and fork) and, with encryption on, the data keys of its
        runs are destroyed, so every copy of those payloads (a backup, an
        export) stays sealed for good once the wrapping key it was made under
        is retired (docs/data.md). What stays: the runs, their steps, effects,
        decisions, who and when, and this forgetting (who, when, why).
        `why` is stored in clear: no personal data in it."""
        who = _decider(by, why)
        bounds.text(task_id, "task_id")
        if not task_id or len(task_id) > MAX_ID_CHARS:
            raise errors.InvalidInput(f"a task id is 1 to {MAX_ID_CHARS} characters")
        return await self.store.forget_task(task_id, by=who, why=why)

    async def reconcile(
        self,
        run_id: str,
        effect: str,
        *,
        happened: Any = MISSING,
        not_happened: bool = False,
        compensate: Any = MISSING,
        by: str,
        why: str = "",
    ) -> RunInfo:
        """Decide the outcome of an effect that stopped its run as
        `outcome_unknown`: it `happened` (with this result), it did
        `not_happened` (send it), or it was compensated (`compensate=` what was
        done; the workflow sees `EffectCompensated`). The decision is journaled
        with who made it and why, and the run continues from it."""
        chosen = [happened is not MISSING, not_happened, compensate is not MISSING]
        if sum(chosen) != 1:
            raise errors.SteadError(
                "give exactly one decision: happened=RESULT, not_happened=True or "
                "compensate=DETAIL"
            )
        if not by:
            raise errors.SteadError("say who decides (by=...): the decision is audited")
        target = _unknown_effect(await self.journal(run_id), run_id, effect)
        if happened is not MISSING:
            payload = {"decision": "happened", "result": happened}
        elif not_happened:
            payload = {"decision": "not_happened", "result": None}
        else:
            payload = {"decision": "compensate", "result": compensate}
        payload |= {"by": by, "why": why}
        text = codec.dumps(payload, what="the reconcile decision")
        # One record per (address, attempt, phase): a second decision on the
        # same attempt takes the next attempt number.
        attempt = target.attempt + 1 if target.status == RecordStatus.RECONCILED else target.attempt
        record = target.evolve(status=RecordStatus.RECONCILED, payload=text, attempt=attempt)
        row = await self.store.resume_stopped(run_id, RunStatus.OUTCOME_UNKNOWN, record)
        meters.effect(EffectOutcome.RECONCILED)
        return RunInfo.from_row(row)

    async def retry(self, run_id: str) -> RunInfo:
        """Let a run that stead stopped be claimed again: one stopped as
        `incompatible_checkpoint` (once code that fits its journal is
        deployed), one stopped as `outcome_unknown` (its `check` is asked
        again; an effect with neither check nor idempotency stops it again), or
        one that failed on a store error rather than on the workflow's own
        exception. Nothing in the journal changes. A run the workflow itself
        failed, completed or cancelled is refused with `NotStopped`."""
        await self.store.check_not_forgotten(run_id)
        info = await self.get(run_id)
        if info.status not in RETRYABLE and not _failed_by_store(info):
            raise errors.NotStopped(
                f"run {run_id} is {info.status}"
                + (f" ({(info.error or {}).get('type', 'Error')} raised by the workflow)"
                   if info.status == RunStatus.FAILED else "")
                + (": a paused run is decided with resume or terminate (stead runs resume "
                   "RUN --by WHO --why WHY)" if info.status == RunStatus.PAUSED else
                   ": only a run stead stopped (incompatible_checkpoint, outcome_unknown, "
                   "or failed on a store error) can be retried. To go on from where it "
                   f"ended once the code is fixed, fork it whole: stead runs fork {run_id} "
                   "(its journaled effects are replayed, not sent again); or start a new "
                   "run")
            )
        try:
            row = await self.store.resume_stopped(run_id, info.status, None)
        except errors.StoreError as exc:
            if info.status != RunStatus.FAILED or info.task_id is None:
                raise
            # A failed run gave its task up: another run of the task may be live now.
            raise errors.StoreError(
                f"could not retry run {run_id} ({exc}); if task {info.task_id!r} has "
                "a live run now, let it end or cancel it first"
            ) from exc
        return RunInfo.from_row(row)

    async def resume(self, run_id: str, *, by: str | None = None, why: str,
                     intent: Intent | None = None) -> RunInfo:
        """Resume a paused run: a person's decision, recorded as a new version
        of its intent (`intent`, or the one in force) with who and why. The
        policy is asked again when a worker takes it."""
        by = _decider(by, why)
        await self.store.check_not_forgotten(run_id)
        if intent is not None and self.app is not None:
            self.app.check_intent(intent)
        now = self.store.clock.now()

        def revise(current: records.IntentRow | None, _run: RunRow) -> str:
            if intent is not None:
                return intent.anchored(now).dumps()
            return current.intent if current is not None else Intent().dumps()

        _, row = await self.store.revise_intent(
            run_id, revise, author=by, why=f"resumed: {why}", resume=RunStatus.PAUSED)
        return RunInfo.from_row(row)

    async def revise(
        self, run_id: str, *, why: str, by: str | None = None, goal: str | None = None,
        instructions: str | None = None, grants: Sequence[Grant] | None = None,
    ) -> records.IntentRow:
        """Revise the intent of a run that is running, waiting, paused or
        pending: a new `goal`, new `instructions`, `grants` narrowed (each a
        narrowing of a grant it holds; a tool left out is withdrawn). Stored
        as a new version with who (`by`, default: the OS user) and why; the
        holder's effects are checked against it at once (the grant check reads
        the version in force), and the next resume judges against it. Raises
        `RunEnded` for an ended run and `GrantWidening` for a grant that would
        widen; nothing is stored then."""
        who = _decider(by, why)
        revision = revisions.Revision(goal, instructions, grants)
        if grants is not None and self.app is not None:
            for grant in grants:
                self.app.check_tool(grant.tool)
        now = self.store.clock.now()
        row, _run = await self.store.revise_intent(
            run_id, lambda current, run: revision.apply(current, run, now), author=who,
            why=f"revised: {why}")
        return row

    async def set_state(
        self, task_id: str, patch: Mapping[str, Any], *, expect_version: int, why: str,
        by: str | None = None,
    ) -> Facts:
        """Change a task's facts from outside any run (an inventory system, an
        operator): merge `patch` (JSON merge patch, None deletes a key) if the
        state is still at `expect_version`, else raise `StateConflict`; the
        version written keeps who (`by`, default: the OS user) and why. A run
        of the task reads it at its next `run.state.get()`; a waiting or paused
        run sees it when it resumes."""
        edit = revisions.StateEdit(patch, expect_version)
        who = _decider(by, why)
        if not isinstance(task_id, str) or not task_id.strip() or len(task_id) > MAX_ID_CHARS:
            raise errors.InvalidInput(
                f"a task id is a non-empty string of at most {MAX_ID_CHARS} characters")
        row = await self.store.set_state(task_id, lambda current: edit.apply(task_id, current),
                                         author=who, why=why)
        return Facts.from_row(row)

    async def terminate(self, run_id: str, *, by: str | None = None, why: str) -> RunInfo:
        """End a paused run as `revalidation_failed`, with who and why."""
        by = _decider(by, why)
        row = await self.store.end_stopped(
            run_id, RunStatus.PAUSED, RunStatus.REVALIDATION_FAILED,
            json.dumps({"type": "RevalidationFailed", "by": by, "why": why,
                        "message": f"terminated by {by}: {why}"}))
        return RunInfo.from_row(row)

    async def renew_grant(
        self, run_id: str, tool: str, *, by: str | None = None, why: str,
        expires_in: float | None = None, expires_at: float | None = None,
        scope: Mapping[str, Any] | None = None, widen: bool = False,
    ) -> RunInfo:
        """Renew the run's grant for `tool` (a new expiry, and `scope` if
        given), as a new version of its intent; a paused run resumes with it.
        A renewal may narrow the scope; one that widens it raises
        `GrantWidening` unless `widen=True`."""
        by = _decider(by, why)
        if self.app is not None:
            self.app.check_tool(tool)
        now = self.store.clock.now()
        renewed = Grant(tool=tool, scope={} if scope is None else scope,
                        expires_at=expires_at, expires_in=expires_in)  # checks the values
        widened: list[str] = []

        def revise(current: records.IntentRow | None, run: RunRow) -> str:
            revisions.refuse_ended(run, f"renewing its grant for {tool!r}")
            intent = _granting(current, run_id, tool)
            before = intent.grants_for(tool)[0]
            fresh = renewed.expires_at is not None or renewed.expires_in is not None
            grant = dataclasses.replace(
                before, scope=before.scope if scope is None else renewed.scope,
                expires_at=renewed.expires_at if fresh else before.expires_at,
                expires_in=renewed.expires_in).anchored(now)
            widened[:] = grant.widens(before)
            if widened and not widen:
                raise errors.GrantWidening(
                    f"renewing the grant for {tool!r} would widen it ({'; '.join(widened)}); "
                    "a renewal may only narrow. Pass widen=True (--widen) to widen on purpose")
            others = tuple(g for g in intent.grants if g.tool != tool)
            return dataclasses.replace(intent, grants=(*others, grant)).dumps()

        info = await self.get(run_id)
        resume = RunStatus.PAUSED if info.status == RunStatus.PAUSED else None
        _, row = await self.store.revise_intent(
            run_id, revise, author=by, resume=resume,
            why=f"grant {tool} renewed{' (widened)' if widen else ''}: {why}")
        return RunInfo.from_row(row)

    async def deny_grant(self, run_id: str, tool: str, *, by: str | None = None,
                         why: str) -> RunInfo:
        """Withdraw the run's grant for `tool` (a new version of its intent);
        a paused run is terminated as `revalidation_failed`."""
        by = _decider(by, why)

        def revise(current: records.IntentRow | None, run: RunRow) -> str:
            revisions.refuse_ended(run, f"denying its grant for {tool!r}")
            intent = _granting(current, run_id, tool)
            return dataclasses.replace(
                intent, grants=tuple(g for g in intent.grants if g.tool != tool)).dumps()

        _, row = await self.store.revise_intent(run_id, revise, author=by,
                                                why=f"grant {tool} denied: {why}")
        if row.status == RunStatus.PAUSED:
            return await self.terminate(run_id, by=by, why=f"grant {tool} denied: {why}")
        return RunInfo.from_row(row)


def _decider(by: str | None, why: str) -> str:
    """Who decides (`by`, default: the OS user), once the decision says why."""
    if not isinstance(why, str) or not why.strip():
        raise errors.InvalidInput("a decision says who made it (by) and why: give both")
    bounds.text(why, "why (the decision's reason)")
    return revisions.author(by)



def _granting(current: records.IntentRow | None, run_id: str, tool: str) -> Intent:
    intent = None if current is None else Intent.loads(current.intent)
    if intent is None or not intent.grants_for(tool):
        held = ", ".join(sorted({g.tool for g in intent.grants})) if intent else ""
        raise errors.InvalidIntent(
            f"run {run_id} has no grant for tool {tool!r} (its grants: {held or 'none'}); "
            "give it one with a new intent: stead runs resume RUN --intent FILE")
    return intent
