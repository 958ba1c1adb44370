"""Tenants: the customer a run serves. A tenant id is given at start
(`Client.start(tenant=)`, a queue's or a schedule's `tenant=`), inherited by a
run's children, forks and successors, and stored with the run (table
`run_tenants`); runs started without one belong to no tenant (stored as '').

An id is bounded text a person can read in a URL, a log line or a metric
label: 1 to 64 letters, digits and `_ . : @ -`, starting with a letter or a
digit. Anything else is refused at the door with `InvalidTenant`.
"""

from __future__ import annotations

import re

from stead import errors

MAX_CHARS = 64
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@\-]{0,63}")
# How a run of no tenant is stored (the empty string is never a valid id).
NONE = ""


def is_id(text: object) -> bool:
    """Whether `text` is a tenant id stead keeps."""
    return isinstance(text, str) and _ID.fullmatch(text) is not None


def check(tenant: object, what: str = "tenant=") -> str | None:
    """`tenant` if it is a valid id, None for None; `InvalidTenant` otherwise."""
    if tenant is None:
        return None
    if not isinstance(tenant, str):
        raise errors.InvalidTenant(f"{what} takes a tenant id (a string), not "
                                   f"{type(tenant).__name__}")
    if not is_id(tenant):
        shown = tenant if len(tenant) <= MAX_CHARS else tenant[:MAX_CHARS] + "..."
        raise errors.InvalidTenant(
            f"{what} {shown!r} is not a tenant id: 1 to {MAX_CHARS} letters, digits and "
            "'_ . : @ -', starting with a letter or a digit (e.g. 'acme' or 'org:42')")
    return tenant


def stored(tenant: str | None) -> str:
    """How `tenant` is kept in `run_tenants.tenant`."""
    return NONE if tenant is None else tenant


def read(value: object) -> str | None:
    """A stored tenant as a run shows it: None for no tenant."""
    return value if isinstance(value, str) and value != NONE else None
