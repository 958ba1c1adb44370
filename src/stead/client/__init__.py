"""`Client`: what is done to runs from outside a worker. Start them; read their
status, result, journal, waits and events; list, cancel, retry and reconcile
them; deliver events to their waits.

`Client` is one class made of the parts of what it does, one module each:
`starting` (start, start_many, fork), `delivering` (events to waits),
`deciding` (reconcile, cancel, retry, resume, revise, grants, task state),
`inspecting` (get, list, search, journals, waits, history) and `migrating`
(to another version or database), over `base` (the store, the app, the
limits). `info` holds `RunInfo`; `listing` lists runs from a store alone;
`forks` and `revisions` are the pure plans that `fork`, `revise` and
`set_state` store.

Each name here is imported when it is first used (PEP 562, as in `stead`):
`from stead.client import RunInfo` or `stead.client.listing` loads neither
`Client` nor its parts, which `stead runs ls` does not need."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stead import lazy

if TYPE_CHECKING:
    from stead.client.client import Client
    from stead.client.info import RunInfo
    from stead.client.migrating import MigrationReport

__all__ = ["Client", "MigrationReport", "RunInfo"]

_WHERE = {"Client": "stead.client.client", "MigrationReport": "stead.client.migrating",
          "RunInfo": "stead.client.info"}


__getattr__, __dir__ = lazy.names("stead.client", _WHERE, globals(), __all__)
