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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stead.client.client import Client
    from stead.client.info import RunInfo
    from stead.client.migrating import MigrationReport

__all__ = ["Client", "MigrationReport", "RunInfo"]

_WHERE = {"Client": "stead.client.client", "MigrationReport": "stead.client.migrating",
          "RunInfo": "stead.client.info"}


def __getattr__(name: str) -> Any:
    # Called only for a name not yet in this module's namespace; the value is
    # kept there, so the next use is an ordinary attribute read.
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'stead.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
