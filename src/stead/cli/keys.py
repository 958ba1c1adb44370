"""`stead keys ls|add|revoke|rotate|reencrypt`: the keys that sign wait
tokens and the data keys that wrap payloads' keys, kept in a key file
outside the database (see `stead.keys`, `stead.payloads`)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import click

from stead import errors, keys
from stead.cli import common

# Seconds `stead keys reencrypt` rests between batches at least.
REWRAP_PAUSE = 0.01


@click.group("keys")
def keys_group() -> None:
    """The keys that sign wait tokens (never kept in the database).

    New tokens are signed with the newest key; tokens of every key that is not
    revoked verify. To rotate: `stead keys add`, copy the file to every machine,
    then, once the old tokens may go, `stead keys revoke OLD_ID`.

    With encryption on (STEAD_ENCRYPT=1), the file's data keys wrap the key each
    run's payloads are sealed with: `stead keys rotate` adds one (copy the file
    to every machine, restart the workers), `stead keys reencrypt` rewraps the
    stored keys under it, in small batches, beside live workers.
    """


def _file_option(f: Any) -> Any:
    return click.option(
        "--file", "file", metavar="PATH", type=click.Path(dir_okay=False),
        help="The key file (default: STEAD_KEY_FILE, else the file beside the SQLite "
             "database, e.g. stead.db.keys, else ~/.config/stead/keys).")(f)


def _path(ctx: click.Context, file: str | None) -> Path:
    if file is not None:
        return Path(file)
    db = common.database_url(ctx)
    beside = None
    if db.startswith("sqlite:"):
        from stead.store.sqlite import path_from_url

        try:
            path = path_from_url(db)
        except errors.StoreError as exc:
            raise click.ClickException(str(exc)) from exc
        beside = None if path == ":memory:" else path + ".keys"
    return keys.key_file(beside)


def _note_env() -> None:
    if os.environ.get(keys.SECRET_ENV):
        click.echo(f"note: {keys.SECRET_ENV} is set, so it signs tokens, not a key file",
                   err=True)


@keys_group.command("ls")
@_file_option
@click.pass_context
def keys_ls(ctx: click.Context, file: str | None) -> None:
    """List the key file's keys (ids only) and the revoked ids."""
    path = _path(ctx, file)
    try:
        ring = keys.read_file(path)
    except FileNotFoundError:
        raise click.ClickException(f"no key file at {path}; make one with `stead keys add`"
                                   ) from None
    except errors.SteadError as exc:
        raise click.ClickException(str(exc)) from exc
    _note_env()
    current = ring.current.id if any(k.id not in ring.revoked for k in ring.keys) else None
    for key in ring.keys:
        role = "signs new tokens" if key.id == current else "verifies"
        click.echo(f"{key.id}  {role}  added {key.added_at or '?'}")
    for kid in sorted(ring.revoked):
        click.echo(f"{kid}  revoked")
    for key in ring.data_keys:
        role = "wraps new payload keys" if key is ring.data_keys[-1] else "unwraps"
        click.echo(f"{key.id}  data key, {role}  added {key.added_at or '?'}")


@keys_group.command("add")
@_file_option
@click.pass_context
def keys_add(ctx: click.Context, file: str | None) -> None:
    """Add a new key (making the file, mode 0600, if needed): new tokens are
    signed with it; tokens of the older keys verify until they are revoked."""
    path = _path(ctx, file)
    try:
        key = keys.add_key(path)
    except (OSError, errors.SteadError) as exc:
        raise click.ClickException(f"cannot add a key to {path}: {exc}") from exc
    _note_env()
    click.echo(f"added key {key.id} to {path}: new tokens are signed with it. Copy the file "
               "to every machine that runs workers or checks tokens.")


@keys_group.command("revoke")
@click.argument("key_id", metavar="ID")
@_file_option
@click.pass_context
def keys_revoke(ctx: click.Context, key_id: str, file: str | None) -> None:
    """Revoke key ID (or `legacy`: tokens signed with the secret a database kept
    before keys left it): tokens it signed are refused from now on."""
    path = _path(ctx, file)
    try:
        keys.revoke(path, key_id)
    except FileNotFoundError:
        raise click.ClickException(f"no key file at {path}; make one with `stead keys add`"
                                   ) from None
    except (OSError, errors.SteadError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"revoked key {key_id} in {path}: tokens it signed are refused from now on. "
               "Copy the file to every machine that checks tokens.")


@keys_group.command("rotate")
@_file_option
@click.pass_context
def keys_rotate(ctx: click.Context, file: str | None) -> None:
    """Add a new data key (making the file, mode 0600, if needed): it wraps the
    payload keys made from now on; the older data keys still unwrap theirs.
    Then `stead keys reencrypt` rewraps the stored ones under it."""
    path = _path(ctx, file)
    try:
        key = keys.rotate(path)
    except (OSError, errors.SteadError) as exc:
        raise click.ClickException(f"cannot add a data key to {path}: {exc}") from exc
    click.echo(f"added data key {key.id} to {path}: it wraps new payload keys. Copy the "
               "file to every machine, restart the workers, then run `stead keys reencrypt`.")


@keys_group.command("reencrypt")
@click.option("--batch", default=200, show_default=True, type=click.IntRange(1, 10_000),
              help="Payload keys rewrapped per transaction.")
@click.option("--pause", default=REWRAP_PAUSE, show_default=True,
              type=click.FloatRange(0.0, 60.0), metavar="SECONDS",
              help="Rest between batches, and at least as long as the batch took, so "
                   "live workers' writes go first.")
@click.pass_context
def keys_reencrypt(ctx: click.Context, batch: int, pause: float) -> None:
    """Rewrap every stored payload key under the newest data key, a batch per
    transaction (safe beside live workers, and to stop and run again). The
    payloads themselves are not rewritten: each run's key is what changes
    hands. A pass rewraps the keys made before it began: it ends even beside
    workers that still wrap new keys with an older data key, and says how
    many those made. Once none is left under an older data key, those unwrap
    nothing and may be removed."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> tuple[int, str, dict[str | None, int]]:
        async with common.opened_store(db, interactive=False) as store:
            if not store.sealing:
                raise click.ClickException(
                    "encryption is off here: set STEAD_ENCRYPT=1 (with the key file that "
                    "holds the data keys) to rewrap payload keys")
            done, after, pass_began = 0, "", None
            while True:
                began = time.monotonic()
                rewrapped = await store.rewrap_keys(after, batch, pass_began)
                done += rewrapped.done
                if rewrapped.last is None:
                    return done, rewrapped.newest, await store.payload_key_counts()
                after, pass_began = rewrapped.last, rewrapped.began
                # SQLite's waiting writers poll for the write lock with
                # growing sleeps: batches back to back would hold it at
                # every poll and keep a live worker's writes (lease renewals
                # among them) out for the whole pass.
                await asyncio.sleep(max(pause, time.monotonic() - began))

    try:
        done, newest, counts = common.run_async(go())
    except errors.SteadError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"rewrapped {done} payload keys")
    for kid, n in counts.items():
        click.echo(f"{kid or 'forgotten'}  {n} payload keys")
    older = sum(n for kid, n in counts.items() if kid is not None and kid != newest)
    if older:
        click.echo(f"{older} payload keys are still wrapped by an older key: made during the "
                   f"pass by workers that still wrap with it (a pass rewraps the keys made "
                   f"before it began, and so ends). Restart every worker with the key file "
                   f"whose newest data key is {newest}, then run it again.")
