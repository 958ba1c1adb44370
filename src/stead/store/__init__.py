"""Storage: one `Store` interface, opened from a URL."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from stead import errors
from stead.clock import Clock, SystemClock
from stead.store.base import Store
from stead.store.urls import display_url

if TYPE_CHECKING:
    from stead.keys import KeySource

DEFAULT_URL = "sqlite:///stead.db"


def database_url(url: str | None = None) -> str:
    """The URL to use: the one given, else `STEAD_DATABASE_URL`, else the default.
    An empty one is refused rather than read as "the default"."""
    if url is None:
        url = os.environ.get("STEAD_DATABASE_URL")
        if url is None:
            return DEFAULT_URL
        where = "STEAD_DATABASE_URL"
    else:
        where = "the database URL"
    if not url.strip():
        raise errors.StoreError(
            f"{where} is empty; give one, e.g. {DEFAULT_URL}"
            + (", or unset it for that default" if where != "the database URL" else "")
        )
    return url


async def open_store(
    url: str | None = None, *, clock: Clock | None = None, retry_for: float = 30.0,
    keys: KeySource | None = None, lease_clock: Clock | None = None, existing: bool = False,
) -> Store:
    """Open (and migrate) the store at `url`; see `database_url` for the default.
    `clock` is business time (timers, deadlines, expiries, row times). Leases
    are judged by the database's own clock inside each statement, whatever
    `clock` says; `lease_clock` replaces that clock, for tests that expire
    leases by moving a `FakeClock` (see docs/architecture.md).
    A server-backed store retries a lost connection for up to `retry_for`
    seconds before raising `StoreUnavailable`. `keys` (a `stead.Keyring`, or a
    function returning one) signs and checks wait tokens; without it they come
    from `STEAD_SECRET` or a key file (see `stead.keys`). `existing` opens only
    a database that is there (an SQLite file that is gone is `DatabaseMissing`,
    not created afresh): for a second connection to a store already open."""
    url = database_url(url)
    clock = clock or SystemClock()
    if url.startswith("sqlite:"):
        from stead.store import sqlite

        store: Store = sqlite.SQLiteStore(url, clock=clock, lease_clock=lease_clock,
                                          existing=existing)
    elif url.startswith(("postgresql:", "postgres:")):
        try:
            from stead.store import postgres
        except ImportError as exc:  # psycopg is an optional dependency
            raise errors.StoreError(
                f"{url.split(':', 1)[0]} URLs need psycopg: pip install 'stead[postgres]' "
                f"({exc})"
            ) from exc
        store = postgres.PostgresStore(url, clock=clock, lease_clock=lease_clock,
                                        retry_for=retry_for)
    else:
        raise errors.StoreError(
            f"unsupported database URL {display_url(url)!r}: use sqlite:///path/to/file.db or "
            "postgresql://user@host:5432/db"
        )
    if keys is not None:
        store.key_source = keys
    try:
        await store.open()
    except BaseException:
        await store.close()  # a failed open leaves no connection or thread behind
        raise
    return store


__all__ = ["DEFAULT_URL", "Store", "database_url", "display_url", "open_store"]
