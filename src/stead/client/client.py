"""`Client`, made of its parts (see `stead.client`)."""

from __future__ import annotations

from stead.client.delivering import Delivering
from stead.client.migrating import Migrating
from stead.client.sharing import Sharing
from stead.client.spending import Spending
from stead.client.starting import Starting

__all__ = ["Client"]


class Client(Starting, Delivering, Spending, Migrating, Sharing):
    """`max_event_bytes` caps an event's payload and bound values (as JSON);
    `lock_wait_after` bad tokens lock a wait (see `unlock_wait`)."""
