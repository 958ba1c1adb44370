"""`Standing`: whether a worker can be sure it still holds its leases, so
that its runs may start calls that reach outside (a step, a model call, an
effect's send or check).

It cannot be sure while its presence lock is lost (a claimer elsewhere may be
counting down the grace after which it takes the worker for dead), nor once
its last successful renewal is so old that its leases may have run out. Its
runs then wait before each such call, and go on once its lease keeper has the
lock back and has renewed every lease it holds: a lease found lost there
stops its run (`Worker._lost`), the others were never taken. Calls already
in flight go on: nothing stops a call midway; only new ones wait.

Written by the lease keeper's thread, read on the worker's loop: the flags
are plain attributes (assigned whole), and the keeper wakes the waiters with
`call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

# How often a waiting run looks again, besides being woken.
_LOOK = 0.1


class Standing:
    def __init__(self, lease_seconds: float) -> None:
        self._lease = lease_seconds
        self._absent = False
        # Until when (monotonic) the leases surely hold: the last successful
        # renewal was sent then, plus the lease, less a margin for the
        # database's commit and clock (a sixth of the lease).
        self._sure_until = time.monotonic() + lease_seconds * 5 / 6
        self._regained: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The worker's loop, where runs wait."""
        self._loop = loop
        self._regained = asyncio.Event()

    # -- the lease keeper's side ------------------------------------------------
    def absent(self) -> None:
        """The presence lock is lost: no new call starts until `present`."""
        self._absent = True

    def present(self) -> None:
        """The presence lock is held, and every lease was renewed since it was
        taken (or it never was lost)."""
        self._absent = False
        self._wake()

    def renewed(self, sent_at: float) -> None:
        """A renewal sent at `sent_at` (monotonic) succeeded: the leases it
        kept hold until its lease ends, as the database counts from after it."""
        self._sure_until = sent_at + self._lease * 5 / 6
        self._wake()

    def _wake(self) -> None:
        loop, regained = self._loop, self._regained
        if loop is not None and regained is not None:
            with contextlib.suppress(RuntimeError):  # the worker's loop has closed
                loop.call_soon_threadsafe(regained.set)

    # -- the runs' side (the worker's loop) -----------------------------------------
    def sure(self) -> bool:
        """Whether the worker can be sure now that it still holds its leases."""
        return not self._absent and time.monotonic() < self._sure_until

    async def regained(self) -> None:
        """Return once the worker is sure again (see `sure`)."""
        while not self.sure():
            regained = self._regained
            if regained is None:
                await asyncio.sleep(_LOOK)
                continue
            regained.clear()
            if self.sure():
                return
            # asyncio.timeout, not wait_for: a run's code awaits this, and a
            # task made here would be numbered as a branch of the run.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_LOOK):
                    await regained.wait()
