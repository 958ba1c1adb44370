"""Runs this worker let go of but could not release: an attempt ended on a
store error, and the release that should have followed failed too (the
database locked or unreachable for a moment). The run stays leased to this
worker, held by no execution. Left alone, it would wait for its lease to
run out before any worker, this one included, could take it; and a worker
working until idle would stop beside it, the run still `running`. So the
worker tries the release again on each turn of its loop, and is not idle
while one is left."""

from __future__ import annotations

import logging

from stead.records import Fence
from stead.store.base import Store
from stead.worker import attempts

log = logging.getLogger("stead.worker")


class Leftovers:
    """The fences of runs whose release has still to be made."""

    def __init__(self) -> None:
        self._fences: dict[str, Fence] = {}

    def __bool__(self) -> bool:
        return bool(self._fences)

    def keep(self, fence: Fence) -> None:
        log.warning("run %s: its release failed; tried again on the worker's next turn",
                    fence.run_id)
        self._fences[fence.run_id] = fence

    async def release(self, store: Store) -> None:
        """Try each release again; those the store took (or that are no longer
        this worker's to make) are done with."""
        for run_id, fence in list(self._fences.items()):
            if await attempts.release_quietly(store, fence):
                log.info("run %s released", run_id)
                self._fences.pop(run_id, None)
