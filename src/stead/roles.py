"""Who may do what: an operator's roles, and the role each action needs.

The roles are ordered: each holds what the ones before it may do. A viewer
reads; an approver also answers a human's wait (approve, reject); an operator
also decides everything else about a run (reconcile, resume, retry, cancel,
grants, locks); an admin also changes what code a run is on (migrate, roll
back). Each operator action declares the least role it needs
(`operator.Action.role`).

A role may be held in one tenant (`ROLE@TENANT`, or a `(role, tenant)`
pair): an operator of tenant A sees and acts on A's runs alone. A role held
in no tenant holds in every one: an admin so sees all.
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


Given = Role | str | tuple[Role | str, str | None]


def held_in(given: Given) -> tuple[Role, str | None]:
    """The role and tenant of `ROLE`, `ROLE@TENANT` or `(role, tenant)`;
    ValueError for an unknown role or an empty tenant."""
    if isinstance(given, tuple):
        role, tenant = given
    else:
        role, at, named = str(given).partition("@")
        tenant = named.strip() if at else None
    if tenant is not None and not tenant:
        raise ValueError(f"{given!r}: name the tenant after the @")
    return Role(str(role).strip().lower()), tenant


def parse(names: Iterable[str]) -> frozenset[Role]:
    """The roles among `names` (case and spaces ignored); others are left out."""
    known = {r.value: r for r in Role}
    return frozenset(known[n] for n in (x.strip().lower() for x in names) if n in known)
