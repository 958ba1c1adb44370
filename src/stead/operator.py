"""What an operator does to runs, and what needs one: the actions (reconcile,
approve or reject a wait, renew, narrow or deny a grant, resume or terminate
a paused run, retry, cancel, unlock or revoke a wait) and the "needs a human"
list, over `Client`. The dashboard (`stead.web`) draws forms from the actions
and the list; any other face (a script, the command line) calls `act` and
gets the same checks and the same audit.

An action is a small record: its fields, where it applies (`targets`: the
waits, effects or tools of a run as it is now) and what it does (`perform`,
one `Client` call). `act` refuses an action decided on a view of the run that
is no longer true (`RunMovedOn`) or that no longer applies (`UnknownAction`),
and keeps every attempt, done or refused, with who and why
(`Client.store.record_action`). Adding an action is one `Action(...)` in
`ACTIONS`; adding a kind of "needs a human" is one finder in `FINDERS`.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from stead import bounds, errors, timeline, waits
from stead.client import Client, RunInfo
from stead.client.deciding import MISSING, RETRYABLE
from stead.client.inspecting import STRANDED_AFTER
from stead.intent import Grant, Intent
from stead.records import (
    TERMINAL,
    ActionOutcome,
    ActionRow,
    Record,
    RunStatus,
    WaitRow,
    WaitState,
)
from stead.roles import Role, allows

# Open waits that expire within this many seconds need a human.
NEAR_EXPIRY = 3600.0


class FieldKind(enum.StrEnum):
    """How a field's text is read."""

    TEXT = "text"
    JSON = "json"  # any JSON value
    SECONDS = "seconds"  # a positive number of seconds
    CHOICE = "choice"  # one of `Field.choices`


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    label: str
    kind: FieldKind = FieldKind.TEXT
    required: bool = False
    choices: tuple[str, ...] = ()
    hint: str = ""


@dataclasses.dataclass(frozen=True)
class Situation:
    """A run as an operator sees it now: what actions are offered on."""

    run: RunInfo
    open_waits: tuple[WaitRow, ...]
    grants: tuple[Grant, ...]
    unknown_effects: tuple[str, ...]  # keys of effects whose outcome is not known
    now: float
    # The version the client's app can migrate the run to (None: no migration leads
    # from its version to one the app hosts), and whether its last migration can be
    # rolled back (it has one, not rolled back yet).
    migrate_to: int | None = None
    rollback: bool = False
    has_intent: bool = False  # it carries an intent, which a person may revise


@dataclasses.dataclass(frozen=True)
class Decision:
    """One operator's decision: the action's `target` (a wait id, an effect
    key, a tool; "" for the run), its field `values` as typed, who and why."""

    run_id: str
    target: str
    values: Mapping[str, str]
    by: str
    why: str


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


# -- reading fields ---------------------------------------------------------------------
def _json(decision: Decision, name: str, default: Any = MISSING) -> Any:
    text = decision.values.get(name, "").strip()
    if not text:
        if default is MISSING:
            raise errors.InvalidInput(f"{name}: give a JSON value")
        return default
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise errors.InvalidInput(f"{name} is not valid JSON: {exc}") from None


def _seconds(decision: Decision, name: str) -> float | None:
    text = decision.values.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise errors.InvalidInput(f"{name}: {text[:40]!r} is not a number of seconds") from None
    return bounds.seconds(value, name)


def _object(decision: Decision, name: str) -> dict[str, Any] | None:
    value = _json(decision, name, None)
    if value is not None and not isinstance(value, dict):
        raise errors.InvalidInput(f"{name} must be a JSON object")
    return value


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
        result = _json(d, "result")
        await client.reconcile(d.run_id, d.target, happened=result, by=d.by, why=d.why)
        return f"effect {d.target} happened; the run continues with its result"
    if choice == "not_happened":
        await client.reconcile(d.run_id, d.target, not_happened=True, by=d.by, why=d.why)
        return f"effect {d.target} did not happen; the run sends it, with the same key"
    if choice == "compensate":
        detail = _json(d, "result")
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
    extra = _object(d, "payload") or {}
    return await _deliver(client, d, {**extra, "approved": True})


async def _reject(client: Client, d: Decision) -> str:
    return await _deliver(client, d, {"approved": False, "reason": d.values.get("reason", "")})


async def _renew(client: Client, d: Decision) -> str:
    expires_in = _seconds(d, "expires_in")
    if expires_in is None:
        raise errors.InvalidInput("expires_in: how many seconds the renewed grant lasts")
    info = await client.renew_grant(d.run_id, d.target, by=d.by, why=d.why,
                                    expires_in=expires_in, scope=_object(d, "scope"))
    return f"grant {d.target} renewed for {expires_in:g} s; the run is {info.status}"


async def _narrow(client: Client, d: Decision) -> str:
    scope = _object(d, "scope")
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


# -- the run as it is now --------------------------------------------------------------------
def unknown_effects(journal: Sequence[Record]) -> tuple[str, ...]:
    """The keys of effects whose last phase leaves their outcome open."""
    return tuple(v.key or v.name for v in timeline.effect_views(journal)
                 if v.phase in _OPEN_PHASES)


_OPEN_PHASES = frozenset({"intent", "accepted", "unknown", "reconciled"})


async def situation(client: Client, run_id: str) -> Situation:
    info = await client.get(run_id)
    open_waits = tuple(await client.waits(run_id=run_id, state=WaitState.OPEN, limit=1000))
    intents = await client.intents(run_id)
    grants = Intent.loads(intents[-1].intent).grants if intents else ()
    unknown = (unknown_effects(await client.journal(run_id))
               if info.status == RunStatus.OUTCOME_UNKNOWN else ())
    migrate_to = None
    if client.app is not None and not info.done:
        path = client.app.migrations_path(info.workflow, info.version)
        migrate_to = path[-1].to_version if path else None
    migrations = await client.migrations(run_id)
    rollback = bool(migrations) and migrations[-1].rolled_back_at is None
    return Situation(info, open_waits, tuple(grants), unknown, client.store.clock.now(),
                     migrate_to, rollback, bool(intents))


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
        await _audit(client, name, decision, ActionOutcome.REFUSED, str(exc))
        raise
    return Done(message, await _audit(client, name, decision, ActionOutcome.DONE, message))


async def _audit(client: Client, name: str, d: Decision, outcome: ActionOutcome,
                 detail: str) -> ActionRow:
    row = ActionRow(action_id=uuid.uuid4().hex, run_id=d.run_id, action=name,
                    target=d.target, author=d.by, why=d.why, outcome=outcome,
                    detail=detail[:2000], at=client.store.clock.now())
    return await client.store.record_action(row)


# -- what needs a human ------------------------------------------------------------------------
class AttentionKind(enum.StrEnum):
    OUTCOME_UNKNOWN = "outcome_unknown"
    PAUSED = "paused"
    INCOMPATIBLE = "incompatible_checkpoint"
    APPROVAL = "approval"  # an open wait that takes a token: a person answers it
    WAIT_EXPIRING = "wait_expiring"  # any other wait, near its expiry
    WAIT_LOCKED = "wait_locked"
    STRANDED = "stranded"


@dataclasses.dataclass(frozen=True)
class Attention:
    """One thing a person must decide: on which run, what, and the actions
    (with their targets) that resolve it."""

    kind: AttentionKind
    run: RunInfo
    summary: str
    actions: tuple[tuple[Action, str], ...]
    due: float | None = None  # when it gets worse (a wait's expiry)
    since: float | None = None  # since when it waits for a person (None: the run's update)
    target: str = ""  # the wait it is about ("" for the run)

    @property
    def waiting_since(self) -> float:
        return self.run.updated_at if self.since is None else self.since


Finder = Callable[[Client, float], Awaitable[list[Attention]]]


def _resolving(s: Situation, *names: str, target: str | None = None
               ) -> tuple[tuple[Action, str], ...]:
    return tuple((a, t) for a, t in offered(s)
                 if a.name in names and (target is None or t == target))


async def _stopped(client: Client, now: float) -> list[Attention]:
    found = []
    for status, kind, names in (
        (RunStatus.OUTCOME_UNKNOWN, AttentionKind.OUTCOME_UNKNOWN, ("reconcile", "retry")),
        (RunStatus.PAUSED, AttentionKind.PAUSED,
         ("resume", "terminate", "renew_grant", "deny_grant")),
        (RunStatus.INCOMPATIBLE, AttentionKind.INCOMPATIBLE,
         ("migrate", "rollback", "retry", "cancel")),
    ):
        for info in await client.search_runs(status=status, limit=200):
            s = await situation(client, info.run_id)
            message = str((info.error or {}).get("message", ""))
            found.append(Attention(kind, info, message, _resolving(s, *names)))
    return found


def _due(w: WaitRow, now: float) -> str:
    if w.expires_at is None:
        return "no expiry"
    left = w.expires_at - now
    if left <= 0:
        return "has expired"
    return f"expires in {left / 60:.0f} min" if left < 3600 else \
        f"expires in {left / 3600:.1f} h"


async def _waits(client: Client, now: float) -> list[Attention]:
    """Locked waits; every open wait that takes a token (one a person
    answers: an approval), whenever it expires; other waits near expiry."""
    found = []
    for w in await client.waits(state=WaitState.OPEN, limit=1000):
        locked = w.locked_at is not None
        human = w.token_hash is not None
        near = w.expires_at is not None and w.expires_at - now <= NEAR_EXPIRY
        if not (locked or human or near):
            continue
        s = await situation(client, w.run_id)
        if locked:
            found.append(Attention(
                AttentionKind.WAIT_LOCKED, s.run,
                f"wait {w.kind} ({w.wait_id}) locked after {w.bad_tokens} bad tokens",
                _resolving(s, "unlock_wait", "revoke_wait", target=w.wait_id), w.expires_at,
                w.created_at, w.wait_id))
        else:
            found.append(Attention(
                AttentionKind.APPROVAL if human else AttentionKind.WAIT_EXPIRING, s.run,
                f"wait {w.kind} ({w.wait_id}) {_due(w, now)}",
                _resolving(s, "approve", "reject", "revoke_wait", target=w.wait_id),
                w.expires_at, w.created_at, w.wait_id))
    return found


async def _stranded(client: Client, now: float) -> list[Attention]:
    found = []
    for info in await client.list_runs(stranded=True, grace=STRANDED_AFTER, limit=200):
        s = await situation(client, info.run_id)
        found.append(Attention(
            AttentionKind.STRANDED, info,
            f"{timeline.stranded_reason(info)}: deploy a worker that does, or migrate it",
            _resolving(s, "migrate", "cancel")))
    return found


FINDERS: list[Finder] = [_stopped, _waits, _stranded]


async def needs_a_human(client: Client) -> list[Attention]:
    """Everything that waits for a person's decision, the most pressing
    first: stopped runs, then waits by expiry (those that never expire last)."""
    now = client.store.clock.now()
    found = [a for finder in FINDERS for a in await finder(client, now)]
    order = list(AttentionKind)
    return sorted(found, key=lambda a: (a.target != "", a.due is None, a.due or 0.0,
                                        order.index(a.kind), -a.run.updated_at))
