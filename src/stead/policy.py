"""The policy a run is revalidated against, its decisions, and the intent diff
each resume record carries.

A policy is a function (sync or async; it may ask a policy service) called as
`policy(intent, state, run, action)`: the intent in force (`stead.Intent`, or
None), the task state's facts (a dict), the run (`RunRow`) and the pending
action (`Action`: what the run is about to do live; None only when a takeover
judges a run that acts no more). It is asked at every takeover where the run
is about to act live, before every effect, and before every model call when
the app says so (`App(policy_on=...)`). It returns `Continue` (optionally with
a revised intent), `Pause` (a person decides; optionally proposing a narrowed
intent) or `Terminate` (the run ends as `revalidation_failed`). A policy that
raises, or returns anything else, pauses the run: it fails closed, never open.

A snapshot is what a resume record remembers of the intent, the policy
version and the world (the task state's version and a digest per key); the
diff between two says what changed. Only a change of goal, instructions,
plan, grants, policy version or world is a *change*; the intent's version
number and the budget used are reported beside it (see `changed`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import Any

from stead import calls
from stead.intent import Intent, allows_more, sha256
from stead.records import RecordKind, RunRow


@dataclasses.dataclass(frozen=True, slots=True)
class Continue:
    """Go on, under `intent` if given (stored as a new version of the run's intent)."""

    intent: Intent | None = None
    reason: str = ""
    version: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Pause:
    """Stop the run as `paused` until a person resumes or terminates it;
    `intent`, if given, is the narrowed intent the policy proposes (the
    record shows it as a diff; a person may resume with it)."""

    reason: str
    version: str | None = None
    intent: Intent | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Terminate:
    """End the run as `revalidation_failed`: never retried."""

    reason: str
    version: str | None = None


Decision = Continue | Pause | Terminate
PolicyFn = Callable[[Intent | None, dict[str, Any], RunRow, "Action | None"], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    """What the run is about to do live: a call of `kind` (an effect, a model
    call, a step, a wait...) named `name`, calling `tool` (an effect's; None
    if it names none) with `arguments` (an effect's, by parameter name; empty
    for other calls), whose arguments hash to `digest`, for `reason` (the
    `reason=` of `run.effect` or `run.llm`), costing `cost`."""

    kind: RecordKind
    name: str
    tool: str | None
    arguments: Mapping[str, Any]
    reason: str | None = None
    cost: float | None = None
    digest: str | None = None

    def to_json(self) -> dict[str, Any]:
        """What the audit keeps of it: never the arguments, only their digest."""
        data: dict[str, Any] = {"kind": str(self.kind), "name": self.name}
        for key in ("tool", "reason", "cost", "digest"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        return data


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    """A registered policy and its version (a decision may name another, e.g.
    the version its policy service answered with)."""

    fn: PolicyFn
    version: str = "1"


async def decide(policy: Policy, intent: Intent | None, state: dict[str, Any], run: RunRow,
                 action: Action | None) -> tuple[Decision, str]:
    """The policy's decision and the version it was made under. Fails closed."""
    try:
        answer = await calls.invoke(policy.fn, (intent, state, run, action), {})
    except Exception as exc:
        return Pause(f"the policy raised {type(exc).__qualname__}: {exc}; the run is "
                     "paused until it answers (fail closed)"), policy.version
    if not isinstance(answer, Continue | Pause | Terminate):
        return Pause(f"the policy returned {answer!r}, not stead.Continue, stead.Pause or "
                     "stead.Terminate; the run is paused (fail closed)"), policy.version
    return answer, answer.version or policy.version


class Verdict(enum.StrEnum):
    """A decision's kind, as the audit writes it."""

    CONTINUE = "continue"
    PAUSE = "pause"
    TERMINATE = "terminate"
    # Recorded when the policy was not asked at a takeover: the run ended or
    # stopped before it acted live again.
    NOT_ASKED = "not asked"


def decision_json(decision: Decision, version: str, current: Mapping[str, Any] | None = None,
                  at: float = 0.0) -> dict[str, Any]:
    """The audit of a decision; a `Pause` proposing an intent carries it and
    its diff from `current` (the snapshot in force)."""
    kind = {Continue: Verdict.CONTINUE, Pause: Verdict.PAUSE,
            Terminate: Verdict.TERMINATE}[type(decision)]
    data: dict[str, Any] = {"decision": str(kind), "reason": decision.reason,
                            "policy_version": version}
    if isinstance(decision, Pause) and decision.intent is not None:
        proposed = decision.intent.anchored(at)
        data["proposed"] = proposed.to_json()
        if current is not None:
            data["proposed_diff"] = diff(current, snapshot(
                proposed, int(current.get("intent_version") or 0),
                current.get("policy_version"), float(current.get("at") or at),
                current.get("world")))
    return data


# -- snapshots and diffs ---------------------------------------------------------------
def snapshot(intent: Intent | None, version: int, policy_version: str | None,
             at: float, world: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a resume record remembers of the intent it ran under, and of the
    world (`stead.worlds.world(...)`, None: not known) it resumed on."""
    out: dict[str, Any] = {"intent_version": version, "policy_version": policy_version,
                           "at": at, "grants": {}}
    if intent is not None:
        out.update({
            "goal_sha256": sha256(intent.goal),
            "instructions_sha256": intent.instructions_sha256,
            "plan_version": intent.plan_version,
            "grants": {g.tool: {"scope": dict(g.scope), "expires_at": g.expires_at,
                                "policy": g.policy} for g in intent.grants},
        })
    if world is not None:
        out["world"] = dict(world)
    return out


def world_diff(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
               ) -> dict[str, Any] | None:
    """How the task state moved between two snapshots' worlds: the versions
    and the keys whose values changed (None: it did not move, or one side is
    not known)."""
    if before is None or after is None or before.get("version") == after.get("version"):
        return None
    old, new = dict(before.get("keys") or {}), dict(after.get("keys") or {})
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return {"version": [before.get("version"), after.get("version")], "keys": keys}


def _expired(grant: Mapping[str, Any], at: float) -> bool:
    expires = grant.get("expires_at")
    return expires is not None and at >= float(expires)


def _narrower(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    if any(key not in after or allows_more(key, old, after[key]) for key, old in before.items()):
        return "widened"
    return "narrowed" if dict(before) != dict(after) else "same"


def diff(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> dict[str, Any]:
    """What changed between two snapshots (`before` None: the first one).
    Keys name only what changed; `policy_version` is always given."""
    prior = before or {}
    out: dict[str, Any] = {}
    for key in ("intent_version", "goal_sha256", "instructions_sha256", "plan_version"):
        if before is not None and prior.get(key) != after.get(key):
            out[key] = [prior.get(key), after.get(key)]
    old, new = dict(prior.get("grants") or {}), dict(after.get("grants") or {})
    grants: dict[str, list[Any]] = {}
    if before is not None:
        added = sorted(set(new) - set(old))
        removed = sorted(set(old) - set(new))
        if added:
            grants["added"] = added
        if removed:
            grants["removed"] = removed
        for tool in sorted(set(old) & set(new)):
            change = _narrower(old[tool]["scope"], new[tool]["scope"])
            if change != "same":
                grants.setdefault(change, []).append(
                    {"tool": tool, "from": old[tool]["scope"], "to": new[tool]["scope"]})
    at = float(after.get("at") or 0.0)
    was = float(prior.get("at") or 0.0)
    expired = [tool for tool, g in sorted(new.items())
               if _expired(g, at) and (before is None or tool not in old
                                       or not _expired(old[tool], was))]
    if expired:
        grants["expired"] = expired
    if grants:
        out["grants"] = grants
    moved = world_diff(prior.get("world"), after.get("world"))
    if moved is not None:
        out["world"] = moved
    granted = sorted({g["policy"] for g in new.values() if g.get("policy")})
    out["policy_version"] = [prior.get("policy_version") or (", ".join(granted) or None),
                             after.get("policy_version")]
    return out


# What a diff reports that is a change: a new version number of the same
# intent (an operator's resume writes one) and the budget used are not.
CHANGES = ("goal_sha256", "instructions_sha256", "plan_version", "grants", "world")


def changed(d: Mapping[str, Any]) -> bool:
    """Whether a diff says something changed: the goal, instructions, plan,
    grants, world, or the policy version moving."""
    versions = d.get("policy_version") or [None, None]
    return any(k in d for k in CHANGES) or (
        versions[0] is not None and versions[0] != versions[1])
