"""`stead workspace restore RUN NAME DIR`: a run's saved workspace, for a
person: its latest snapshot (or the one saved at `--seq`) written into a new
directory, checked against its hash. `stead workspace patch RUN NAME`: the
uncommitted patch that snapshot recorded, to stdout or `--output FILE`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from stead.cli import common


@click.group("workspace")
def workspace_group() -> None:
    """Look at the directories runs saved (`stead runs show RUN` lists them)."""


@workspace_group.command("restore")
@common.run_argument
@click.argument("name")
@click.argument("dest", type=click.Path(path_type=Path))
@click.option("--seq", type=common.POSITION, default=None,
              help="The snapshot saved at this journal seq (default: the latest).")
@click.pass_context
def workspace_restore(ctx: click.Context, run_id: str, name: str, dest: Path,
                      seq: int | None) -> None:
    """Restore RUN's workspace NAME into DEST, a directory that must not exist."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> Any:
        async with common.opened_client(db) as client:
            return await client.restore_workspace(run_id, name, dest, seq=seq)

    snap = common.run_async(go())
    click.echo(f"restored workspace {common.safe(name)} of run {common.safe(run_id)} "
               f"(snapshot at seq {snap.seq}, tree {snap.tree[:12]}…, {snap.files} file(s)) "
               f"into {common.safe(dest.absolute())}")


@workspace_group.command("patch")
@common.run_argument
@click.argument("name")
@click.option("--seq", type=common.POSITION, default=None,
              help="The snapshot saved at this journal seq (default: the latest).")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None,
              help="Write the patch into this file (default: stdout).")
@click.pass_context
def workspace_patch(ctx: click.Context, run_id: str, name: str, seq: int | None,
                    output: Path | None) -> None:
    """Print the uncommitted patch RUN's workspace NAME saved (git diff --binary
    against its commit): `git apply` it on that commit."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> bytes:
        async with common.opened_client(db) as client:
            return await client.workspace_patch(run_id, name, seq=seq)

    patch = common.run_async(go())
    if output is None:
        click.echo(patch, nl=False)  # bytes: written as they are
    else:
        output.write_bytes(patch)
        click.echo(f"wrote the patch of workspace {common.safe(name)} ({len(patch)} bytes) "
                   f"into {common.safe(output.absolute())}")
