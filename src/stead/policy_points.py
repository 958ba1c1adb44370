"""Where a live run asks the app's policy (`App(policy_on=...)`). Apart from
`stead.policy`, which holds the policy's decisions and diffs, so that an app
without a policy checks its `policy_on` without loading them."""

from __future__ import annotations

import enum
from collections.abc import Iterable


class PolicyPoint(enum.StrEnum):
    """Where a live run asks the policy (`App(policy_on=...)`); a takeover
    always asks it once, where the run first acts live."""

    EFFECT = "effect"
    LLM = "llm"


POLICY_POINTS = frozenset({PolicyPoint.EFFECT})


def policy_points(points: Iterable[str]) -> frozenset[PolicyPoint]:
    """`points` as `PolicyPoint`s; `effect` is always among them."""
    if isinstance(points, str):
        raise ValueError("policy_on is a collection of points, e.g. ('effect', 'llm')")
    known = {p.value: p for p in PolicyPoint}
    unknown = sorted(str(p) for p in points if p not in known)
    if unknown:
        raise ValueError(f"policy_on names unknown point(s) {', '.join(unknown)}; "
                         f"the points are {', '.join(sorted(known))}")
    return POLICY_POINTS | {known[p] for p in points}
