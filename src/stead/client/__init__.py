"""`Client`: what is done to runs from outside a worker. Start them; read their
status, result, journal, waits and events; list, cancel, retry and reconcile
them; deliver events to their waits.

`Client` is one class made of the parts of what it does, one module each:
`starting` (start, start_many, fork), `delivering` (events to waits),
`deciding` (reconcile, cancel, retry, resume, revise, grants, task state),
`inspecting` (get, list, search, journals, waits, history) and `migrating`
(to another version or database), over `base` (the store, the app, the
limits). `info` holds `RunInfo`; `forks` and `revisions` are the pure plans
that `fork`, `revise` and `set_state` store."""

from __future__ import annotations

from stead.client.deciding import Deciding
from stead.client.delivering import Delivering
from stead.client.info import RunInfo
from stead.client.migrating import Migrating, MigrationReport
from stead.client.starting import Starting

__all__ = ["Client", "MigrationReport", "RunInfo"]


class Client(Starting, Delivering, Deciding, Migrating):
    """`max_event_bytes` caps an event's payload and bound values (as JSON);
    `lock_wait_after` bad tokens lock a wait (see `unlock_wait`)."""
