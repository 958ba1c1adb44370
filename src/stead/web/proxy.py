"""Operators named by an SSO proxy in front of the dashboard (oauth2-proxy,
Pomerium, an ingress with forward auth): an auth hook that reads who the
proxy logged in, and their groups, from its headers.

The proxy sends `X-Forwarded-User` (the operator's name) and
`X-Forwarded-Groups` (their groups, comma separated); `groups` maps a group
to the role it gives (`stead.roles`), and an operator holds the highest role
any of their groups gives, or `default` when none does (`None`: such an
operator is not let in).

A group may give a role in one tenant (`"acme-ops": "operator@acme"`, or
`("operator", "acme")`): an operator whose groups name a tenant is scoped to
it (`Identity.tenant`), and sees no other tenant's runs. Groups that name
two tenants name nobody (an identity is scoped to one), unless one of them
gives `admin` in no tenant, which sees all. Once any group names a tenant,
an operator in no group is not let in: a `default` viewer of every tenant
would see them all. The headers are believed only from the proxy's own
addresses (`trusted`): anyone else can send them too, so from any other
address the request names nobody. Header values are bounded: a name over
`MAX_NAME` characters, or more than `MAX_GROUPS` groups, names nobody.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from starlette.requests import Request

from stead import roles, tenants
from stead.roles import Role
from stead.web.security import AuthHook, Identity

USER_HEADER = "X-Forwarded-User"
GROUPS_HEADER = "X-Forwarded-Groups"
MAX_NAME = 200
MAX_GROUPS = 200


def sso_proxy(trusted: Iterable[str], groups: Mapping[str, roles.Given], *,
              default: Role | None = Role.VIEWER, user_header: str = USER_HEADER,
              groups_header: str = GROUPS_HEADER) -> AuthHook:
    """An auth hook for `create_app(auth=...)` (or `stead ui --trusted-proxy`)
    that names the operator the proxy at one of the `trusted` addresses sent."""
    proxies = frozenset(trusted)
    given = {g.strip(): roles.held_in(r) for g, r in groups.items()}
    for _, tenant in given.values():
        tenants.check(tenant, "a proxy group's tenant")
    if any(tenant is not None for _, tenant in given.values()):
        default = None

    def named(request: Request) -> Identity | None:
        if request.client is None or request.client.host not in proxies:
            return None
        name = request.headers.get(user_header, "").strip()
        if not name or len(name) > MAX_NAME or not name.isprintable():
            return None
        theirs = [g.strip() for g in request.headers.get(groups_header, "").split(",")]
        if len(theirs) > MAX_GROUPS:
            return None
        held = {given[g] for g in theirs if g in given}
        if not held:
            if default is None:
                return None
            held = {(default, None)}
        if (Role.ADMIN, None) in held:
            return Identity(name, frozenset(r for r, _ in held))
        tenants = {t for _, t in held if t is not None}
        if len(tenants) > 1:
            return None
        return Identity(name, frozenset(r for r, _ in held), next(iter(tenants), None))

    return named
