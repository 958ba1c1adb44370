"""The operator's actions, one table (`ACTIONS`) the CLI and the dashboard
both draw: where each applies on the run as it is now and what it does (one
`Client` call), and `act`, which checks that it still applies, does it and
audits the attempt."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from stead import errors
from stead.client import Client
from stead.client.deciding import RETRYABLE
from stead.operator import audit
from stead.operator.forms import Decision, Field, FieldKind, read_json, read_object, read_seconds
from stead.operator.situation import Situation, situation
from stead.records import TERMINAL, ActionOutcome, ActionRow, RunStatus
from stead.roles import Role, allows
from stead.workflow import waits


@dataclasses.dataclass(frozen=True)
class Action:
    """`targets(situation)`: what it can be done to now ([""]: the run itself,
    []: not offered). `perform` makes the `Client` call and says what it did."""

    name: str
    label: str
    targets: Callable[[Situation], Sequence[str]]
    perform: Callable[[Client, Decision], Awaitable[str]]
    fields: tuple[Field, ...] = ()
    danger: bool = False  # ends the run or withdraws something: asked to confirm
    role: Role = Role.OPERATOR  # the least role that may take it (`stead.roles`)


@dataclasses.dataclass(frozen=True)
class Done:
    """What `act` did: the action's message and the audit row kept for it."""

    message: str
    audit: ActionRow



# -- where each action applies ------------------------------------------------------------
def _the_run_if(*statuses: RunStatus) -> Callable[[Situation], Sequence[str]]:
    return lambda s: [""] if s.run.status in statuses else []


def _open_waits(s: Situation) -> Sequence[str]:
    return [w.wait_id for w in s.open_waits] if s.run.status == RunStatus.WAITING else []


def _locked_waits(s: Situation) -> Sequence[str]:
    return [w.wait_id for w in s.open_waits if w.locked_at is not None]


def _unknown(s: Situation) -> Sequence[str]:
    return list(s.unknown_effects) if s.run.status == RunStatus.OUTCOME_UNKNOWN else []


def _grants(s: Situation) -> Sequence[str]:
    return [] if s.run.status in TERMINAL else sorted({g.tool for g in s.grants})


def _retryable(s: Situation) -> Sequence[str]:
    error = s.run.error if isinstance(s.run.error, dict) else {}
    store_failure = (s.run.status == RunStatus.FAILED
                     and error.get("type") in ("StoreError", "StoreUnavailable",
                                               "DatabaseMissing"))
    if s.run.status == RunStatus.OUTCOME_UNKNOWN:
        # A retry asks the effect's check again; without a check it only stops again.
        return [""] if error.get("checked") is True else []
    return [""] if s.run.status in RETRYABLE or store_failure else []


def _revisable(s: Situation) -> Sequence[str]:
    return [""] if s.has_intent and not s.run.done else []


def _live(s: Situation) -> Sequence[str]:
    return [] if s.run.done else [""]


def _migratable(s: Situation) -> Sequence[str]:
    return [] if s.run.done or s.migrate_to is None else [str(s.migrate_to)]


def _rollbackable(s: Situation) -> Sequence[str]:
    return [""] if s.rollback and not s.run.done else []


# -- what each does -------------------------------------------------------------------------
async def _reconcile(client: Client, d: Decision) -> str:
    choice = d.values.get("decision", "")
    if choice == "happened":
        result = read_json(d, "result")
        await client.reconcile(d.run_id, d.target, happened=result, by=d.by, why=d.why)
        return f"effect {d.target} happened; the run continues with its result"
    if choice == "not_happened":
        await client.reconcile(d.run_id, d.target, not_happened=True, by=d.by, why=d.why)
        return f"effect {d.target} did not happen; the run sends it, with the same key"
    if choice == "compensate":
        detail = read_json(d, "result")
        await client.reconcile(d.run_id, d.target, compensate=detail, by=d.by, why=d.why)
        return f"effect {d.target} was compensated; the workflow sees EffectCompensated"
    raise errors.InvalidInput("decision: one of happened, not_happened, compensate")


def event_id(run_id: str, wait_id: str, by: str, payload: Any, nonce: str = "") -> str:
    """An operator's event id: the same decision sent twice (a form submitted
    twice: same `nonce`) is one event, a Duplicate the second time."""
    basis = json.dumps([run_id, wait_id, by, payload, nonce], sort_keys=True)
    return "op-" + hashlib.sha256(basis.encode()).hexdigest()[:20]


async def _deliver(client: Client, d: Decision, payload: dict[str, Any]) -> str:
    found = [w for w in await client.waits(run_id=d.run_id, state=None, limit=1000)
             if w.wait_id == d.target]
    if not found:
        raise errors.UnknownAction(f"run {d.run_id} has no wait {d.target}")
    bind = json.loads(found[0].bind)
    verdict = await client.deliver(
        d.run_id, wait_id=d.target, payload=payload, bind=bind,
        event_id=event_id(d.run_id, d.target, d.by, payload, d.values.get("nonce", "")),
        operator=waits.Operator(d.by, d.why))
    if isinstance(verdict, waits.Accepted):
        return f"Accepted: event {verdict.event_id} resumes the run (delivered by {d.by})"
    if isinstance(verdict, waits.Duplicate):
        return f"Duplicate: event {verdict.event_id} was accepted before; nothing happened again"
    raise errors.RunMovedOn(f"the event was stored and {verdict}")


async def _approve(client: Client, d: Decision) -> str:
    extra = read_object(d, "payload") or {}
    return await _deliver(client, d, {**extra, "approved": True})


async def _reject(client: Client, d: Decision) -> str:
    return await _deliver(client, d, {"approved": False, "reason": d.values.get("reason", "")})


async def _renew(client: Client, d: Decision) -> str:
    expires_in = read_seconds(d, "expires_in")
    if expires_in is None:
        raise errors.InvalidInput("expires_in: how many seconds the renewed grant lasts")
    info = await client.renew_grant(d.run_id, d.target, by=d.by, why=d.why,
                                    expires_in=expires_in, scope=read_object(d, "scope"))
    return f"grant {d.target} renewed for {expires_in:g} s; the run is {info.status}"


async def _narrow(client: Client, d: Decision) -> str:
    scope = read_object(d, "scope")
    if scope is None:
        raise errors.InvalidInput("scope: the narrower scope, a JSON object")
    info = await client.renew_grant(d.run_id, d.target, by=d.by, why=d.why, scope=scope)
    return f"grant {d.target} narrowed; the run is {info.status}"


async def _deny(client: Client, d: Decision) -> str:
    info = await client.deny_grant(d.run_id, d.target, by=d.by, why=d.why)
    return f"grant {d.target} withdrawn; the run is {info.status}"


async def _resume(client: Client, d: Decision) -> str:
    info = await client.resume(d.run_id, by=d.by, why=d.why)
    return f"resumed under the intent in force; the run is {info.status}"


async def _revise(client: Client, d: Decision) -> str:
    goal = d.values.get("goal", "").strip() or None
    instructions = d.values.get("instructions", "").strip() or None
    row = await client.revise(d.run_id, by=d.by, why=d.why, goal=goal,
                              instructions=instructions)
    return f"intent revised (version {row.version}); the run's next resume judges against it"


async def _terminate(client: Client, d: Decision) -> str:
    info = await client.terminate(d.run_id, by=d.by, why=d.why)
    return f"terminated: the run is {info.status}"


async def _retry(client: Client, d: Decision) -> str:
    info = await client.retry(d.run_id)
    return f"the run is claimable again (epoch {info.epoch})"


async def _cancel(client: Client, d: Decision) -> str:
    info = await client.cancel(d.run_id)
    return f"the run is {info.status}"


async def _fork(client: Client, d: Decision) -> str:
    text = d.values.get("at", "").strip()
    try:
        at = int(text)
    except ValueError:
        raise errors.InvalidInput(f"at: {text[:40]!r} is not a journal position") from None
    info = await client.fork(d.run_id, at=at)
    return f"forked after {at} records: new run {info.run_id}"


async def _migrate(client: Client, d: Decision) -> str:
    report = await client.migrate(d.run_id, to=int(d.target), by=d.by,
                                  dry_run=d.values.get("dry_run") == "yes")
    finding = report.replay.finding
    if finding is not None:
        raise errors.MigrationRefused(
            f"version {report.to_version} cannot replay the migrated journal, nothing "
            f"changed: {finding.message}")
    if not report.applied:
        return (f"dry run: version {report.to_version} replays the migrated journal "
                f"({report.records_before} → {report.records_after} records); nothing changed")
    return (f"migrated from version {report.from_version} to {report.to_version} "
            f"({report.records_before} → {report.records_after} records; the old journal is kept)")


async def _rollback(client: Client, d: Decision) -> str:
    info = await client.rollback(d.run_id, by=d.by)
    return f"rolled back: the run is on version {info.version} again, with its old journal"


async def _unlock(client: Client, d: Decision) -> str:
    await client.unlock_wait(d.target)
    return f"wait {d.target} accepts its token again"


async def _revoke(client: Client, d: Decision) -> str:
    await client.revoke_wait(d.target)
    return f"wait {d.target} revoked; the run wakes to WaitRevoked"


_WHY = "recorded with the decision"
ACTIONS: dict[str, Action] = {a.name: a for a in (
    Action("reconcile", "Reconcile the effect", _unknown, _reconcile, (
        Field("decision", "What happened", FieldKind.CHOICE, required=True,
              choices=("happened", "not_happened", "compensate")),
        Field("result", "Its result (happened) or what undid it (compensate)", FieldKind.JSON,
              hint='e.g. {"refund": "rf_1"}'),
    )),
    Action("approve", "Approve (as operator)", _open_waits, _approve, (
        Field("payload", "More payload fields", FieldKind.JSON, hint="a JSON object"),
    ), role=Role.APPROVER),
    Action("reject", "Reject (as operator)", _open_waits, _reject, (
        Field("reason", "Reason given to the workflow"),
    ), danger=True, role=Role.APPROVER),
    Action("renew_grant", "Renew the grant", _grants, _renew, (
        Field("expires_in", "Lasts (seconds)", FieldKind.SECONDS, required=True),
        Field("scope", "Narrower scope (optional)", FieldKind.JSON,
              hint='e.g. {"max_amount": 1000}'),
    )),
    Action("narrow_grant", "Narrow the grant", _grants, _narrow, (
        Field("scope", "Narrower scope", FieldKind.JSON, required=True),
    )),
    Action("deny_grant", "Deny the grant", _grants, _deny, danger=True),
    Action("resume", "Resume", _the_run_if(RunStatus.PAUSED), _resume),
    Action("terminate", "Terminate", _the_run_if(RunStatus.PAUSED), _terminate, danger=True),
    Action("revise", "Revise the goal or instructions", _revisable, _revise, (
        Field("goal", "New goal (optional)"),
        Field("instructions", "New instructions (optional; stored as their hash)"),
    )),
    Action("retry", "Retry", _retryable, _retry),
    Action("unlock_wait", "Unlock the wait", _locked_waits, _unlock),
    Action("revoke_wait", "Revoke the wait", _open_waits, _revoke, danger=True),
    Action("migrate", "Migrate to the new version", _migratable, _migrate, (
        Field("dry_run", "Only check", FieldKind.CHOICE, required=True, choices=("yes", "no")),
    ), role=Role.ADMIN),
    Action("rollback", "Roll back the last migration", _rollbackable, _rollback, danger=True,
           role=Role.ADMIN),
    Action("cancel", "Cancel the run", _live, _cancel, danger=True),
    Action("fork", "Fork a new run from its journal", lambda s: [""], _fork, (
        Field("at", "Keep the first N journal records", required=True,
              hint="0 to the journal's length"),
    )),
)}


def offered(s: Situation) -> list[tuple[Action, str]]:
    """Every action that applies to the run now, with its target."""
    return [(a, t) for a in ACTIONS.values() for t in a.targets(s)]


def _check_view(s: Situation, status: str | None, epoch: int | None) -> None:
    run = s.run
    if (status is not None and status != run.status) or (epoch is not None and epoch != run.epoch):
        raise errors.RunMovedOn(
            f"the run moved on since this was decided: it was {status} at epoch {epoch}, "
            f"it is {run.status} at epoch {run.epoch} now; look again and decide again")


async def act(client: Client, name: str, decision: Decision, *,
              expect_status: str | None = None, expect_epoch: int | None = None,
              roles: Iterable[Role] | None = None) -> Done:
    """Do the action `name` as `decision` says, if it still applies: the run
    is as the decider saw it (`expect_status`, `expect_epoch`, when given),
    the action is offered on its target and, when the decider's `roles` are
    given, one of them allows it. Every attempt is audited; a refusal is
    audited and raised (`NotAllowed`, `RunMovedOn`, `UnknownAction`, or the
    client's own error)."""
    if not decision.by.strip() or not decision.why.strip():
        raise errors.InvalidInput("an operator's action says who decided it and why: give both")
    action = ACTIONS.get(name)
    if action is None:
        raise errors.UnknownAction(f"no action {name!r}; one of: {', '.join(ACTIONS)}")
    held = None if roles is None else frozenset(roles)
    try:
        s = await situation(client, decision.run_id)
        if held is not None and not allows(held, action.role):
            raise errors.NotAllowed(
                f"{action.label.lower()} needs the role {action.role} or above; "
                f"{decision.by} holds {', '.join(sorted(held)) or 'no role'}: ask someone "
                "who holds it")
        _check_view(s, expect_status, expect_epoch)
        if decision.target not in action.targets(s):
            raise errors.UnknownAction(
                f"{action.label.lower()} does not apply to "
                f"{decision.target or 'the run'} now (the run is {s.run.status})")
        message = await action.perform(client, decision)
    except errors.UnknownRun:
        raise
    except errors.SteadError as exc:
        await audit.record(client, name, decision, ActionOutcome.REFUSED, str(exc))
        raise
    return Done(message, await audit.record(client, name, decision, ActionOutcome.DONE, message))
