"""The server store: PostgreSQL (`postgresql://user@host:5432/db?schema=NAME`)."""

from __future__ import annotations

from stead.clock import Clock
from stead.store.base import Store
from stead.store.postgres.database import PostgresDatabase
from stead.store.schema_versions import Migrating


class PostgresStore(Store):
    """The store on a PostgreSQL schema (see `database`). A lost connection is
    retried for up to `retry_for` seconds before `StoreUnavailable`.
    `direct_url` (else `STEAD_PG_DIRECT_URL`): the server itself, for what
    needs a session when `url` goes through a transaction pooler."""

    def __init__(self, url: str, *, clock: Clock, lease_clock: Clock | None = None,
                 retry_for: float = 30.0, migrating: Migrating | None = None,
                 direct_url: str | None = None) -> None:
        super().__init__(PostgresDatabase(url, clock=clock, lease_clock=lease_clock,
                                          retry_for=retry_for, migrating=migrating,
                                          direct_url=direct_url))


__all__ = ["PostgresDatabase", "PostgresStore"]
