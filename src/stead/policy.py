"""The policy a run is revalidated against, its decisions, and the intent diff
each resume record carries.

A policy is a function (sync or async; it may ask a policy service) called as
`policy(intent, state, run, action)`: the intent in force (`stead.Intent`, or
None), the task state's facts (a dict), the run (`RunRow`) and the pending
action (`Action`; None at a takeover). It returns `Continue` (optionally with a
revised intent), `Pause` (a person decides) or `Terminate` (the run ends as
`revalidation_failed`). A policy that raises, or returns anything else,
pauses the run: it fails closed, never open.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from stead import calls
from stead.intent import Intent, allows_more, sha256
from stead.records import RunRow


@dataclasses.dataclass(frozen=True, slots=True)
class Continue:
    """Go on, under `intent` if given (stored as a new version of the run's intent)."""

    intent: Intent | None = None
    reason: str = ""
    version: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Pause:
    """Stop the run as `paused` until a person resumes or terminates it."""

    reason: str
    version: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Terminate:
    """End the run as `revalidation_failed`: never retried."""

    reason: str
    version: str | None = None


Decision = Continue | Pause | Terminate
PolicyFn = Callable[[Intent | None, dict[str, Any], RunRow, "Action | None"], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    """What the run is about to do: an effect `name` calling `tool` (None if
    it names none) with `arguments` (by parameter name), for `reason`."""

    kind: str
    name: str
    tool: str | None
    arguments: Mapping[str, Any]
    reason: str | None = None
    cost: float | None = None


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


def decision_json(decision: Decision, version: str) -> dict[str, Any]:
    kind = {Continue: "continue", Pause: "pause", Terminate: "terminate"}[type(decision)]
    return {"decision": kind, "reason": decision.reason, "policy_version": version}


# -- snapshots and diffs ---------------------------------------------------------------
def snapshot(intent: Intent | None, version: int, policy_version: str | None,
             at: float) -> dict[str, Any]:
    """What a resume record remembers of the intent it ran under."""
    if intent is None:
        return {"intent_version": version, "policy_version": policy_version, "at": at,
                "grants": {}}
    return {
        "intent_version": version,
        "goal_sha256": sha256(intent.goal),
        "instructions_sha256": intent.instructions_sha256,
        "plan_version": intent.plan_version,
        "grants": {g.tool: {"scope": dict(g.scope), "expires_at": g.expires_at,
                            "policy": g.policy} for g in intent.grants},
        "policy_version": policy_version,
        "at": at,
    }


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
    granted = sorted({g["policy"] for g in new.values() if g.get("policy")})
    out["policy_version"] = [prior.get("policy_version") or (", ".join(granted) or None),
                             after.get("policy_version")]
    return out


def changed(d: Mapping[str, Any]) -> bool:
    """Whether a diff says anything changed (the policy version moving counts)."""
    versions = d.get("policy_version") or [None, None]
    return any(k for k in d if k != "policy_version") or (
        versions[0] is not None and versions[0] != versions[1])
