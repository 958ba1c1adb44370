"""`stead keys ls|add|revoke`: the keys that sign wait tokens, kept in a key
file outside the database (see `stead.keys`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from stead import errors, keys
from stead.cli import common


@click.group("keys")
def keys_group() -> None:
    """The keys that sign wait tokens (never kept in the database).

    New tokens are signed with the newest key; tokens of every key that is not
    revoked verify. To rotate: `stead keys add`, copy the file to every machine,
    then, once the old tokens may go, `stead keys revoke OLD_ID`.
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
