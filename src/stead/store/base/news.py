"""A store's wait for news of work, which never ends by failing.

`stead.waiting.first` takes a waiter that raises as ended, as it takes one
that returns: it is how a worker hears news at once. So a database whose
`wait_for_work` raised at once (a wrapper with the wrong signature, a bug,
an error no retry mends) would end every idle worker's wait at once, and
the worker would claim again, in a loop, every claim a query: a core spent,
and on PostgreSQL the database hammered, by a worker with nothing to do.
Here such a wait says why, once until a wait ends well again, and waits out
its timeout: the worker polls, as it does where the store cannot notify.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from stead.store import seam

log = logging.getLogger("stead.store")


class NewsWait:
    """A store's waits for news of work from its database."""

    def __init__(self, database: seam.Database) -> None:
        self.database = database
        self.failing = False  # the last wait raised (said once, until one ends well)

    async def wait(self, timeout: float, ring: Callable[[], None] | None,
                   since: seam.WorkMark | None) -> None:
        """The database's `wait_for_work`; if it raises, the rest of
        `timeout` waited out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            await self.database.wait_for_work(timeout, ring=ring, since=since)
        except Exception as exc:  # any failure: a worker must not spin on it
            if not self.failing:
                self.failing = True
                log.warning("%s: could not wait for news of work (%s: %s); idle workers "
                            "poll (every %g s) until a wait works again", self.database.display,
                            type(exc).__name__, exc, timeout)
            await asyncio.sleep(max(deadline - loop.time(), 0.0))
            return
        if self.failing:
            self.failing = False
            log.info("%s: waits hear news of work again", self.database.display)
