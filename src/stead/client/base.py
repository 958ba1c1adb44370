"""What every part of `Client` holds: the store it drives (as one tenant
sees it, for a client scoped to a tenant), the app that registers the
workflows (if any), and the limits on what it accepts of an event."""

from __future__ import annotations

from typing import cast

from stead import tenants
from stead.app import App
from stead.store.base import Store
from stead.tenant_scope.scoped import Scoped
from stead.workflow import waits

# What a client accepts of an event, by default: its payload and bound values
# as JSON, and each of its ids.
MAX_EVENT_BYTES = 256 * 1024
MAX_ID_CHARS = 256


class Base:
    """The store, the app and the limits; `Client` adds what it does with them.

    A client given a `tenant` works inside it: every run it starts serves
    the tenant, and another tenant's runs, waits, events and streams are not
    there for it (`UnknownRun`); asking beyond the tenant otherwise is
    `OutsideTenant`. Its `store` is the store as the tenant sees it
    (`stead.tenant_scope`), so what reads through `client.store` is scoped
    too. Without a tenant a client sees every run."""

    def __init__(self, store: Store, app: App | None = None, *,
                 max_event_bytes: int = MAX_EVENT_BYTES,
                 lock_wait_after: int = waits.LOCK_AFTER_BAD_TOKENS,
                 tenant: str | None = None) -> None:
        if max_event_bytes < 1 or lock_wait_after < 1:
            raise ValueError("max_event_bytes and lock_wait_after must be at least 1")
        self.tenant = tenants.check(tenant, "Client(tenant=)")
        # A scoped store has a Store's operations and applies the tenant's
        # rule to each (typed as the Store it stands for).
        self.store = store if tenant is None else cast(Store, Scoped(store, tenant))
        self.app = app
        self.max_event_bytes = max_event_bytes
        self.lock_wait_after = lock_wait_after
