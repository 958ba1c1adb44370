"""The embedded store: SQLite (`sqlite:///stead.db`)."""

from __future__ import annotations

from stead.clock import Clock
from stead.store.base import Store
from stead.store.schema_versions import Migrating
from stead.store.sqlite.connection import busy_timeout_from_url, path_from_url
from stead.store.sqlite.database import SQLiteDatabase


class SQLiteStore(Store):
    """The store on an SQLite file (see `database`)."""

    def __init__(self, url: str, *, clock: Clock, lease_clock: Clock | None = None,
                 busy_timeout: float = 10.0, existing: bool = False,
                 migrating: Migrating | None = None) -> None:
        super().__init__(SQLiteDatabase(url, clock=clock, lease_clock=lease_clock,
                                        busy_timeout=busy_timeout, existing=existing,
                                        migrating=migrating))
        path = path_from_url(url)
        if path == ":memory:":  # a private database: its keys live and die with it
            from stead import keys  # imported here, as in `Store.keyring`

            self.key_source = keys.Keyring((keys.new_key(),))
        else:
            self.key_file = path + ".keys"


__all__ = ["SQLiteDatabase", "SQLiteStore", "busy_timeout_from_url", "path_from_url"]
