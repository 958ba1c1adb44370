"""Who may do what: an operator's roles, and the role each action needs.

The roles are ordered: each holds what the ones before it may do. A viewer
reads; an approver also answers a human's wait (approve, reject); an operator
also decides everything else about a run (reconcile, resume, retry, cancel,
grants, locks); an admin also changes what code a run is on (migrate, roll
back). Each operator action declares the least role it needs
(`operator.Action.role`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class Role(enum.StrEnum):
    VIEWER = "viewer"
    APPROVER = "approver"
    OPERATOR = "operator"
    ADMIN = "admin"


ORDER = tuple(Role)


def allows(held: Iterable[Role], needed: Role) -> bool:
    """Whether any of the roles `held` is `needed` or above it."""
    rank = ORDER.index(needed)
    return any(ORDER.index(r) >= rank for r in held)


def parse(names: Iterable[str]) -> frozenset[Role]:
    """The roles among `names` (case and spaces ignored); others are left out."""
    known = {r.value: r for r in Role}
    return frozenset(known[n] for n in (x.strip().lower() for x in names) if n in known)
