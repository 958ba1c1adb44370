"""A run's decision context while a worker holds it: the intent in force, the
budget it has consumed, and the checks a live call passes first: every live
model call, step and effect is bounded by the run's authority (a grant not
yet expired, a wall-clock budget not yet spent, see `bound`), a model call
by its budget, and an effect, before its intent commits, by budget, policy
and grant.

What a run has consumed is counted from its journal, never kept beside it: a
takeover counts the records it loaded, and each live write adds what it
journals. A replayed call is never journaled again, so it never spends twice.

The checks answer with a `Halt` (the run stops as `paused`, or ends as
`revalidation_failed` on a policy's Terminate), which the caller raises;
exhaustion is never a crash.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterable, Mapping
from typing import Any

from stead import errors
from stead.intent import Grant, Intent, Matcher
from stead.policy import Action, Continue, Decision, Pause, Policy, Terminate, decide
from stead.policy_points import POLICY_POINTS, PolicyPoint
from stead.records import IntentRow, Record, RecordKind, RecordStatus, RunRow, RunStatus
from stead.store.base import Guard as CommitGuard


@dataclasses.dataclass(frozen=True, slots=True)
class Halt:
    status: RunStatus
    error: dict[str, Any]


DECIDE = ("stead runs resume RUN --by WHO --why WHY [--intent FILE], stead grants renew "
          "RUN TOOL ..., or stead runs terminate RUN --by WHO --why WHY")


def paused(cause: str, message: str, decide: str = DECIDE, **detail: Any) -> Halt:
    return Halt(RunStatus.PAUSED, {
        "type": "Paused", "cause": cause, **detail,
        "message": f"{message}. Decide: {decide}",
    })


def halted(decision: Decision, version: str, action: Action | None) -> Halt | None:
    """What a policy's decision stops, if anything."""
    where = "" if action is None else f" before {action.kind} {action.name!r}"
    if isinstance(decision, Pause):
        return paused("policy", f"policy {version} paused the run{where}: {decision.reason}",
                      policy_version=version)
    if isinstance(decision, Terminate):
        return Halt(RunStatus.REVALIDATION_FAILED, {
            "type": "RevalidationFailed", "cause": "policy", "policy_version": version,
            "message": f"policy {version} terminated the run{where}: {decision.reason}",
        })
    return None


@dataclasses.dataclass
class Ledger:
    """What a run has consumed, counted from the records it journaled."""

    model_calls: int = 0
    tokens: int = 0
    effects: int = 0
    spend: float = 0.0

    def count(self, records: Iterable[Record]) -> None:
        for r in records:
            if r.kind == RecordKind.LLM and r.status in (RecordStatus.OK, RecordStatus.ERROR):
                self.model_calls += 1
                if r.status == RecordStatus.OK:
                    usage = _json(r.payload).get("usage") or {}
                    self.tokens += int(usage.get("input_tokens", 0)) + int(
                        usage.get("output_tokens", 0))
            elif r.kind == RecordKind.EFFECT and r.status == RecordStatus.INTENT:
                self.effects += 1
                self.spend += float(_json(r.payload).get("cost") or 0.0)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _json(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _when(at: float) -> str:
    return dt.datetime.fromtimestamp(at, tz=dt.UTC).isoformat(timespec="seconds")


class Guard:
    """The intent, policy and ledger of the run one worker holds."""

    def __init__(self, run: RunRow, intent: IntentRow | None, policy: Policy | None,
                 ledger: Ledger) -> None:
        self.run = run
        self.task_key = run.task_id if run.task_id is not None else f"run:{run.run_id}"
        self.version = 0 if intent is None else intent.version
        self.intent = None if intent is None else Intent.loads(intent.intent)
        self.policy = policy
        self.ledger = ledger
        # The policy's pause a person's decision cleared since (see
        # `revalidation.cleared_pause`): the same pause is waived once.
        self.cleared: Mapping[str, Any] | None = None
        # Where a live run asks the policy (`App(policy_on=...)`), and how
        # many decisions this holder journaled (their addresses).
        self.points: frozenset[PolicyPoint] = POLICY_POINTS
        self.decisions = 0

    def adopt(self, row: IntentRow) -> None:
        """A new intent version is in force."""
        self.version = row.version
        self.intent = Intent.loads(row.intent)

    def budget_left(self, now: float | None = None) -> dict[str, Any] | None:
        """What the budget allows and what is used of it (wall-clock seconds
        only when `now` is given)."""
        budget = None if self.intent is None else self.intent.budget
        if budget is None:
            return None
        used: dict[str, Any] = self.ledger.to_json()
        if now is not None:
            used["seconds"] = self.elapsed(now)
        return {"used": used, "left": {name: limit - used[name]
                                       for name, limit in budget.to_json().items()
                                       if name in used}}

    def elapsed(self, now: float) -> float:
        """Wall-clock seconds since the run was created (waits included)."""
        return max(0.0, now - self.run.created_at)

    def lifetime_halt(self, now: float, tools: frozenset[str] | None = None) -> Halt | None:
        """A run's lifetime is bounded by its grants: once every grant it holds
        has expired (or it holds none while its app declares `tools`), it
        does nothing more live, not even an effect that names no tool."""
        grants = () if self.intent is None else self.intent.grants
        if not grants:
            return None if tools is None else ungranted(tools)
        if not all(g.expired(now) for g in grants):
            return None
        last = max(grants, key=lambda g: g.expires_at or 0.0)
        assert last.expires_at is not None
        names = sorted({g.tool for g in grants})
        return paused(
            "grants", f"every grant of the run expired (the last, for {last.tool!r}, at "
            f"{_when(last.expires_at)}): nothing acts after its last grant",
            f"stead grants renew RUN {last.tool} --expires-in SECONDS --by WHO --why WHY "
            "(or deny it: stead grants deny RUN TOOL --by WHO --why WHY, which ends the run)",
            expired_at=last.expires_at, grant=last.tool, grants=names)

    def clock_halt(self, now: float) -> Halt | None:
        """Whether the run's wall-clock budget is spent."""
        budget = None if self.intent is None else self.intent.budget
        if budget is None or budget.seconds is None:
            return None
        elapsed = self.elapsed(now)
        if elapsed < budget.seconds:
            return None
        return paused(
            "budget", f"the wall-clock budget is spent (seconds: {elapsed:g} since the run "
            f"started at {_when(self.run.created_at)}, waits included, of {budget.seconds:g}): "
            "nothing acts until a larger budget is given",
            "stead runs resume RUN --by WHO --why WHY --intent FILE (with a larger "
            "budget.seconds), or stead runs terminate RUN --by WHO --why WHY",
            budget=self.budget_left(now))

    def budget_halt(self, *, model_call: bool = False, effect: bool = False,
                    cost: float | None = None) -> Halt | None:
        """Whether the budget forbids the next model call or effect."""
        budget = None if self.intent is None else self.intent.budget
        if budget is None:
            return None
        used = self.ledger
        over = None
        if model_call and budget.model_calls is not None and used.model_calls >= budget.model_calls:
            over = f"model_calls: {used.model_calls} of {budget.model_calls} used"
        elif model_call and budget.tokens is not None and used.tokens >= budget.tokens:
            over = f"tokens: {used.tokens} of {budget.tokens} used"
        elif effect and budget.effects is not None and used.effects >= budget.effects:
            over = f"effects: {used.effects} of {budget.effects} sent"
        elif effect and budget.spend is not None and used.spend + (cost or 0.0) > budget.spend:
            over = f"spend: {used.spend:g} spent, {cost or 0:g} more would pass {budget.spend:g}"
        if over is None:
            return None
        what = "model call" if model_call else "effect"
        return paused("budget", f"the budget is exhausted ({over}): the next {what} waits "
                      "for a larger budget", budget=self.budget_left())

    async def decide(self, state: dict[str, Any],
                     action: Action | None) -> tuple[Decision, str | None]:
        """The policy's decision (Continue when there is no policy). The pause
        a person's decision cleared is not made again: the same pause (reason,
        policy version and action) once more is a Continue that says so."""
        if self.policy is None:
            return Continue(), None
        decision, version = await decide(self.policy, self.intent, state, self.run, action)
        cleared = self.cleared
        if isinstance(decision, Pause) and cleared is not None \
                and (cleared.get("reason"), cleared.get("policy_version")) \
                == (decision.reason, version) and _same_action(cleared.get("action"), action):
            self.cleared = None
            return Continue(reason=f"cleared by {cleared.get('by')} (intent "
                                   f"v{cleared.get('decided_version')}): {decision.reason}",
                            version=decision.version), version
        return decision, version


def _same_action(cleared: Any, action: Action | None) -> bool:
    """Whether `action` is the one a cleared pause stopped (None: any)."""
    if not isinstance(cleared, Mapping) or action is None:
        return True
    return (cleared.get("kind"), cleared.get("name")) == (str(action.kind), action.name)


def ungranted(tools: frozenset[str]) -> Halt:
    """The run holds no grant, and its app acts only under grants."""
    return paused(
        "grants", f"the run holds no grant, and its app acts only under grants for its tools "
        f"({', '.join(sorted(tools)) or 'none'}): nothing acts without one",
        "stead runs resume RUN --by WHO --why WHY --intent FILE (granting its tools), or "
        "stead runs terminate RUN --by WHO --why WHY", grants=[])


def bound(ctx: Guard | None, tools: frozenset[str] | None, now: float, *,
          model_call: bool = False) -> Halt | None:
    """What stops the next live model call, step or effect, if anything: a
    lapsed authority (see `Guard.lifetime_halt`), a spent wall-clock budget,
    and for a model call its budget. Only live calls ask: a replayed record is
    never blocked."""
    if ctx is None:
        return None if tools is None else ungranted(tools)
    return (ctx.lifetime_halt(now, tools) or ctx.clock_halt(now)
            or (ctx.budget_halt(model_call=True) if model_call else None))


def covering(tool: str, arguments: Mapping[str, Any], matchers: Mapping[str, Matcher]
             ) -> tuple[CommitGuard, list[Grant]]:
    """A check to run inside the transaction that commits an effect's
    intent, and the list it puts the covering grant in."""
    chosen: list[Grant] = []

    def check(row: IntentRow | None, now: float) -> None:
        intent = None if row is None else Intent.loads(row.intent)
        grants = [] if intent is None else intent.grants_for(tool)
        if not grants:
            raise errors.GrantRefused(f"no grant for tool {tool!r}")
        reasons = []
        for grant in grants:
            if grant.expired(now):
                assert grant.expires_at is not None
                reasons.append(f"the grant expired at {_when(grant.expires_at)}")
                continue
            refused = grant.covers(arguments, matchers)
            if refused is None:
                chosen[:] = [grant]
                return
            reasons.append(f"the grant's scope does not cover the call: {refused}")
        raise errors.GrantRefused(f"tool {tool!r}: " + "; ".join(reasons))

    return check, chosen
