"""A worker's presence on PostgreSQL: a session-level advisory lock keyed by
the schema and its worker id, held on a connection of its own for as long as
the worker lives. The server frees it when that session ends, so a claimer
on any machine can tell the holder is gone (`lease_holders`, lock_free) and
end its leases without waiting them out. A dropped connection frees it too
(the lock is taken again at the next `keep`): a live worker cut off that
long may see its runs taken over, and its epoch then fences its writes.
"""

from __future__ import annotations

import contextlib
import logging

import psycopg

from stead.store import sql_files
from stead.store.postgres.connection import Conn, Connector

log = logging.getLogger("stead.store.postgres")
_Q = sql_files.queries("postgres")


class Presence:
    def __init__(self, connector: Connector, worker_id: str) -> None:
        self._connector = connector
        self._worker_id = worker_id
        self._conn: Conn | None = None

    async def keep(self) -> bool:
        """Whether the lock is held now, taken on a fresh connection (once
        more, if the last one dropped); False if it cannot be taken yet."""
        if self._conn is not None:
            try:
                cur = await self._conn.execute(_Q["presence_held"])
                row = await cur.fetchone()
                if row and row["held"]:
                    return True
            except psycopg.Error as exc:
                log.warning("worker %s's presence lock connection dropped (%s): taking "
                            "it again", self._worker_id, exc)
        await self.close()
        try:
            conn = await self._connector.connect()
        except psycopg.Error as exc:
            log.warning("could not connect to hold worker %s's presence lock: %s",
                        self._worker_id, exc)
            return False
        try:
            cur = await conn.execute(_Q["presence_lock"], {"worker_id": self._worker_id})
            row = await cur.fetchone()
        except psycopg.Error as exc:
            await conn.close()
            log.warning("could not take worker %s's presence lock: %s", self._worker_id, exc)
            return False
        if not row or not row["held"]:  # another session holds this key
            await conn.close()
            return False
        self._conn = conn
        return True

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()
