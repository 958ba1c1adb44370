"""A run's decision context as text, for `stead runs show`: the intent in
force, its grants with their expiry, the budget left (counted from the
journal), every version of the intent with who and why, each resume's
intent diff, the action the policy judged and its decision (a proposed
intent as a diff), and every decision the policy made before an action."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from stead.guard import Ledger
from stead.intent import Intent
from stead.records import IntentRow, Record, RecordKind, ResumeRecord
from stead.views.runs_view import clock_time


def _expiry(expires_at: float | None, now: float) -> str:
    if expires_at is None:
        return "no expiry"
    left = expires_at - now
    state = "expired" if left <= 0 else f"{left:.0f}s left"
    return f"expires {clock_time(expires_at)} ({state})"


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(", ", ": "))


def intent_lines(intents: Sequence[IntentRow], journal: Sequence[Record], now: float,
                 started: float | None = None) -> list[str]:
    """The intent in force and its versions; `started` (the run's
    `created_at`) lets a wall-clock budget say how much of it is left."""
    if not intents:
        return ["intent: none"]
    row = intents[-1]
    intent = Intent.loads(row.intent)
    lines = [f"intent v{row.version}: {intent.goal or '(no goal)'}"]
    if intent.instructions_sha256:
        lines.append(f"  instructions sha256 {intent.instructions_sha256[:16]}…")
    if intent.plan_version:
        lines.append(f"  plan {intent.plan_version}")
    lines.append(f"  grants ({len(intent.grants)})")
    for g in intent.grants:
        policy = f" [{g.policy}]" if g.policy else ""
        lines.append(f"    {g.tool}{policy} scope {_compact(dict(g.scope))}, "
                     f"{_expiry(g.expires_at, now)}")
    if intent.budget is not None:
        ledger = Ledger()
        ledger.count(journal)
        used = ledger.to_json()
        if started is not None:
            used["seconds"] = max(0.0, now - started)
        parts = [f"{name} {limit - used[name]:g} of {limit:g} left" if name in used
                 # wall-clock time counts from the run's start, waits included
                 else f"{name} {limit:g} from the run's start"
                 for name, limit in intent.budget.to_json().items()]
        lines.append("  budget: " + ", ".join(parts))
    lines.append(f"  versions ({len(intents)})")
    lines += [f"    v{i.version} {clock_time(i.at)} by {i.author}: {i.why}" for i in intents]
    return lines


def resume_lines(resumes: Sequence[ResumeRecord]) -> list[str]:
    lines = []
    for r in resumes:
        revalidation = r.details.intent
        if not revalidation:
            continue
        decision = revalidation.get("decision") or {}
        change = "" if "changed" not in revalidation else \
            " (a change)" if revalidation["changed"] else " (no change)"
        lines.append(f"  epoch {r.epoch}{change}: {decision.get('decision', '?')} "
                     f"(policy {decision.get('policy_version') or 'none'})"
                     + (f": {decision['reason']}" if decision.get("reason") else ""))
        lines += _judged(revalidation.get("action"), decision)
        for key, value in (revalidation.get("diff") or {}).items():
            lines.append(f"    {key}: {_compact(value)}")
    return ["revalidations", *lines] if lines else []


def _judged(action: Any, decision: Mapping[str, Any]) -> list[str]:
    lines = []
    if isinstance(action, Mapping):
        why = f" for {action['reason']!r}" if action.get("reason") else ""
        lines.append(f"    before {action.get('kind')} {action.get('name')!r}{why}")
    for key, value in (decision.get("proposed_diff") or {}).items():
        lines.append(f"    proposes {key}: {_compact(value)}")
    return lines


def decision_lines(journal: Sequence[Record]) -> list[str]:
    """Every decision the policy made before an action, in order."""
    lines = []
    for r in journal:
        if r.kind != RecordKind.DECISION:
            continue
        data = json.loads(r.payload)
        lines.append(f"  seq {r.seq}: {data.get('decision', '?')} "
                     f"(policy {data.get('policy_version') or 'none'})"
                     + (f": {data['reason']}" if data.get("reason") else ""))
        lines += _judged(data.get("action"), data)
    return ["decisions", *lines] if lines else []


def render(intents: Sequence[IntentRow], resumes: Sequence[ResumeRecord],
           journal: Sequence[Record], now: float, started: float | None = None) -> str:
    return "\n".join(["", *intent_lines(intents, journal, now, started),
                       *resume_lines(resumes), *decision_lines(journal)])
