"""A worker's presence on PostgreSQL: a session-level advisory lock keyed by
the schema and its worker id, held on a connection of its own for as long as
the worker lives. The server frees it when that session ends, so a claimer
on any machine can tell the holder may be gone (`lease_holders`, lock_free).

A dropped connection frees it too (a terminated backend, a pooler or server
restart, a failover), so a free lock alone proves nothing: `keep` takes it
back on a fresh connection as soon as it finds it lost, and a claimer takes
the holder for dead only once the lock has stayed free, untaken, for a grace
period longer than that (see `store/_holders.py`).
"""

from __future__ import annotations

import contextlib
import logging

import psycopg

from stead.records import Presence
from stead.store import sql_files
from stead.store.postgres.connection import Conn, Connector

log = logging.getLogger("stead.store.postgres")
_Q = sql_files.queries("postgres")


class PresenceLock:
    def __init__(self, connector: Connector, worker_id: str) -> None:
        self._connector = connector
        self._worker_id = worker_id
        self._conn: Conn | None = None

    async def keep(self) -> Presence:
        """Whether the lock is still held (HELD), or was taken just now on a
        fresh connection (TAKEN: first, or again after the last one
        dropped), or cannot be taken yet (LOST); NONE behind a transaction
        pooler with no direct URL, where no session can hold it."""
        if not self._connector.sessions:
            return Presence.NONE
        if self._conn is not None:
            try:
                cur = await self._conn.execute(_Q["presence_held"])
                row = await cur.fetchone()
                if row and row["held"]:
                    return Presence.HELD
            except psycopg.Error as exc:
                log.warning("worker %s's presence lock connection dropped (%s): taking "
                            "it again", self._worker_id, exc)
        await self.close()
        try:
            conn = await self._connector.connect_session()
        except psycopg.Error as exc:
            log.warning("could not connect to hold worker %s's presence lock: %s",
                        self._worker_id, exc)
            return Presence.LOST
        try:
            cur = await conn.execute(_Q["presence_lock"], {"worker_id": self._worker_id})
            row = await cur.fetchone()
        except psycopg.Error as exc:
            await conn.close()
            log.warning("could not take worker %s's presence lock: %s", self._worker_id, exc)
            return Presence.LOST
        if not row or not row["held"]:
            # Another session holds this key: this worker's own, not yet ended
            # by the server after the connection dropped (it frees it soon).
            await conn.close()
            return Presence.LOST
        self._conn = conn
        return Presence.TAKEN

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()
