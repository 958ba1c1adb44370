"""Storage: one `Store` interface, opened from a URL."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

from stead import errors
from stead.clock import Clock, SystemClock
from stead.store.base import Store
from stead.store.urls import display_url

if TYPE_CHECKING:
    from stead.keys import KeySource
    from stead.payloads import PayloadCodec, Sealer
    from stead.store.schema_versions import Migrating, Report

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
    migrate: str | None = None, payloads: bool | PayloadCodec | None = None,
) -> Store:
    """Open the store at `url`, past its schema's version gate; see
    `database_url` for the default URL.
    `clock` is business time (timers, deadlines, expiries, row times). Leases
    are judged by the database's own clock inside each statement, whatever
    `clock` says; `lease_clock` replaces that clock, for tests that expire
    leases by moving a `FakeClock` (see docs/architecture.md).
    A server-backed store retries a lost connection for up to `retry_for`
    seconds before raising `StoreUnavailable`. `keys` (a `stead.Keyring`, or a
    function returning one) signs and checks wait tokens; without it they come
    from `STEAD_SECRET` or a key file (see `stead.keys`). `existing` opens only
    a database that is there (an SQLite file that is gone is `DatabaseMissing`,
    not created afresh): for a second connection to a store already open.
    `migrate` (else `STEAD_MIGRATE`) says which pending schema migrations
    opening applies: `"all"` (SQLite's default), `"online"` (PostgreSQL's: a
    new database, or migrations that are all compatible and online) or
    `"none"`; a database left behind raises `SchemaBehind`, one migrated past
    what this code can work with `SchemaAhead` (see
    docs/guides/platform/upgrading.md).
    `payloads` seals every payload stored (see `stead.payloads`, docs/data.md):
    True with the data keys of the keyring, a `stead.payloads.PayloadCodec` with
    its keys (a KMS), False not at all; None (the default) reads `STEAD_ENCRYPT`
    (`1` / `0`, off when unset)."""
    from stead.store import schema_versions

    url = database_url(url)
    dialect = "sqlite" if url.startswith("sqlite:") else "postgres"
    migrating = schema_versions.Migrating(on_open=schema_versions.on_open(dialect, migrate))
    return await _opened(url, clock=clock, retry_for=retry_for, keys=keys,
                         lease_clock=lease_clock, existing=existing, migrating=migrating,
                         payloads=payloads)


async def upgrade(url: str | None = None, *, dry_run: bool = False, lock_timeout: float = 2.0,
                  patience: float = 60.0) -> Report:
    """Apply every schema migration the database at `url` lacks (`stead db
    migrate`): breaking ones too, unless a live worker runs older code
    (`MigrationBlocked`). `dry_run` applies nothing and refuses nothing: the
    report says what is pending. On PostgreSQL each statement waits at most
    `lock_timeout` seconds for a lock, and a migration is tried again for up
    to `patience` seconds."""
    from stead.store import schema_versions

    migrating = schema_versions.Migrating(explicit=True, dry_run=dry_run,
                                          lock_timeout=lock_timeout, patience=patience)
    store = await _opened(database_url(url), clock=None, retry_for=3.0, keys=None,
                          lease_clock=None, existing=False, migrating=migrating)
    await store.close()
    assert store.database.versions is not None  # an opened store has passed the gate
    return store.database.versions


async def _opened(url: str, *, clock: Clock | None, retry_for: float, keys: KeySource | None,
                  lease_clock: Clock | None, existing: bool, migrating: Migrating,
                  payloads: bool | PayloadCodec | None = False) -> Store:
    clock = clock or SystemClock()
    if url.startswith("sqlite:"):
        from stead.store import sqlite

        store: Store = sqlite.SQLiteStore(url, clock=clock, lease_clock=lease_clock,
                                          existing=existing, migrating=migrating)
    elif url.startswith(("postgresql:", "postgres:")):
        try:
            from stead.store import postgres
        except ImportError as exc:  # psycopg is an optional dependency
            raise errors.StoreError(
                f"{url.split(':', 1)[0]} URLs need psycopg: pip install -e '.[postgres]' in "
                f"stead's checkout (docs/install.md) ({exc})"
            ) from exc
        store = postgres.PostgresStore(url, clock=clock, lease_clock=lease_clock,
                                        retry_for=retry_for, migrating=migrating)
    else:
        raise errors.StoreError(
            f"unsupported database URL {display_url(url)!r}: use sqlite:///path/to/file.db or "
            "postgresql://user@host:5432/db"
        )
    if keys is not None:
        store.key_source = keys
    try:
        store.database.sealer = _sealer(store, payloads)
        await store.open()
    except BaseException:
        await store.close()  # a failed open leaves no connection or thread behind
        raise
    return store


ON = frozenset({"1", "true", "on", "yes"})
OFF = frozenset({"", "0", "false", "off", "no"})


def encrypting(payloads: bool | PayloadCodec | None) -> bool | PayloadCodec:
    """What `open_store(payloads=)` asks for, `STEAD_ENCRYPT` read for None."""
    from stead.payloads import ENCRYPT_ENV

    if payloads is not None:
        return payloads
    value = os.environ.get(ENCRYPT_ENV, "").strip().lower()
    if value in ON | OFF:
        return value in ON
    raise errors.StoreError(f"{ENCRYPT_ENV}={value[:20]!r}: give 1 (seal payloads) or 0")


def _sealer(store: Store, payloads: bool | PayloadCodec | None) -> Sealer | None:
    """The `Sealer` payloads are sealed with, or None (encryption off)."""
    wanted = encrypting(payloads)
    if wanted is False:
        return None
    from stead import keys
    from stead.payloads import KeyringCodec, Sealer

    if wanted is not True:
        return Sealer(wanted)
    ring = keys.resolve(store.key_source, store.key_file)
    if not ring.data_keys and isinstance(store.key_source, keys.Keyring) \
            and store.key_file is None and store.url.endswith(":memory:"):
        ring = dataclasses.replace(ring, data_keys=(keys.new_key(),))  # lives with the database
        store.key_source = ring
    elif not ring.data_keys and store.key_source is None and store.key_file is not None \
            and keys.KEY_FILE_ENV not in os.environ and keys.SECRET_ENV not in os.environ:
        keys.rotate(store.key_file)  # an SQLite file's own key file: made on first use
        ring = keys.resolve(None, store.key_file)
    ring.current_data  # noqa: B018 (raises KeysUnavailable, saying what to do, if none)
    return Sealer(KeyringCodec(ring))


__all__ = ["DEFAULT_URL", "Store", "database_url", "display_url", "open_store", "upgrade"]
