"""What every part of `Client` holds: the store it drives, the app that
registers the workflows (if any), and the limits on what it accepts of an
event."""

from __future__ import annotations

from stead.app import App
from stead.store.base import Store
from stead.workflow import waits

# What a client accepts of an event, by default: its payload and bound values
# as JSON, and each of its ids.
MAX_EVENT_BYTES = 256 * 1024
MAX_ID_CHARS = 256


class Base:
    """The store, the app and the limits; `Client` adds what it does with them."""

    def __init__(self, store: Store, app: App | None = None, *,
                 max_event_bytes: int = MAX_EVENT_BYTES,
                 lock_wait_after: int = waits.LOCK_AFTER_BAD_TOKENS) -> None:
        if max_event_bytes < 1 or lock_wait_after < 1:
            raise ValueError("max_event_bytes and lock_wait_after must be at least 1")
        self.store = store
        self.app = app
        self.max_event_bytes = max_event_bytes
        self.lock_wait_after = lock_wait_after
