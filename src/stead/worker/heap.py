"""Keeping the garbage collector's full passes short in a worker's process.

CPython's full collection (of its oldest generation) walks every object the
collector tracks and holds the event loop meanwhile. In a worker with its
app and stead imported (about 30,000 objects) each took 10 to 16 ms of CPU
on a 2-core VM, every half second or so of a burst of quick runs, and found
nothing to collect (measured in `bench.tenants`): a newcomer's claim and
every run's next step waited behind it. What a worker holds once it has
warmed up (modules, classes, the app, the SDKs' schemas) lives as long as
the process: `gc.freeze` takes it out of the collector's sight, and the full
passes after it walk only what came since (under 2 ms there). It is done
once per process, before the first claim, with no collection first: one
would hold the loop 10 ms at every worker's start to free a few dozen
objects (40 of 40,000 measured), which the freeze keeps instead.
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_settled = False


def settle() -> None:
    """Freeze what the process holds now (once per process)."""
    global _settled
    with _lock:
        if _settled:
            return
        _settled = True
    gc.freeze()
