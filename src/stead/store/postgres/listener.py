"""LISTEN for work on a session of its own (the direct URL's behind a
pooler); polling where no session can be had (see `postgres/pooler.py`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg

from stead.store import sql_files
from stead.store.postgres.connection import Connector, backoff
from stead.waiting import Bell

log = logging.getLogger("stead.store.postgres")
_Q = sql_files.queries("postgres")


class Listener:
    """LISTEN on a connection of its own; `wait` returns early when another
    process (or this one) commits work to the store's schema (NOTIFY
    stead_work, with the schema as payload). Started on the first wait, so a
    store that only starts runs never holds a LISTEN connection."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector
        self._work = Bell()
        self._task: asyncio.Task[None] | None = None

    async def wait(self, timeout: float, ring: Callable[[], None] | None = None) -> None:
        """Return on the next notification (or one that came since the last
        wait), or after `timeout`; `ring` is called from the listening task
        as the notification comes (see `stead.waiting.Bell`)."""
        if not self.connector.sessions:  # behind a transaction pooler: polling
            await asyncio.sleep(timeout)
            return
        if self._task is None:
            self._task = asyncio.create_task(self._listen(), name="stead-listen")
        try:
            # Not `asyncio.wait_for`: on Python 3.11 it wraps the wait in a
            # task of its own, a turn of the event loop more before a worker
            # busy with other runs claims (see `stead.waiting`).
            with self._work.listening(ring):
                async with asyncio.timeout(timeout):
                    await self._work.wait()
        except TimeoutError:
            return  # a notification that raced the timeout stays set for the next wait
        self._work.clear()

    async def _listen(self) -> None:
        attempt = 0
        while True:
            try:
                conn = await self.connector.connect_session()
                try:
                    await conn.execute(_Q["listen"])
                    attempt = 0
                    self._work.set()  # work may have come while nobody listened
                    async for note in conn.notifies():
                        if note.payload == self.connector.target.schema:
                            self._work.set()
                finally:
                    await conn.close()
            except psycopg.Error as exc:
                attempt += 1
                delay = max(0.05, backoff(attempt))
                where = (self.connector.direct or self.connector.target).display
                log.warning("LISTEN connection to %s lost (%s); polling meanwhile, "
                            "reconnecting in %.2f s", where, exc, delay)
                await asyncio.sleep(delay)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
