"""The `stead` command: run a worker, start runs, inspect and cancel them,
reconcile an effect whose outcome is unknown, answer waiting runs, migrate the
database, manage the keys that sign wait tokens, watch a run survive a crash
(`stead demo`), crash your own workflows at every boundary (`stead chaos`)
and serve the operator's dashboard and event webhook (`stead ui`).

This module builds the root group and adds the command groups, one module each;
what they share (the database URL, loading `module:app`, opening a client,
error handling) is in `stead.cli.common`. Nothing imports this module back.
Commands reach the store only through `stead.Client`, except `worker`, which
runs a `stead.Worker`, and `db migrate` and `db prune`, which open the store to
migrate it and to delete old runs (`stead.retention`).
"""

from __future__ import annotations

import click

from stead.cli import (
    chaos,
    common,
    db,
    demo,
    deploy,
    events,
    grants,
    keys,
    reconcile,
    runs,
    state,
    ui,
    worker,
    workspace,
)

__all__ = ["main"]


@click.group(cls=common.Root, context_settings={"help_option_names": ["-h", "--help"]})
@common.database_option
@click.version_option(package_name="stead", prog_name="stead")
def main(db: str) -> None:
    """stead: durable execution for AI agents. Resume, don't rerun.

    Run workers for your app, start runs, and inspect what each run journaled
    and how it was resumed. Try `stead demo` to watch a run survive a crash.
    """


main.add_command(worker.worker)
main.add_command(runs.start)
main.add_command(runs.runs)
main.add_command(reconcile.reconcile)
main.add_command(grants.grants_group)
main.add_command(events.approve)
main.add_command(events.reject)
main.add_command(events.events)
main.add_command(events.waits_group)
main.add_command(db.db_group)
main.add_command(keys.keys_group)
main.add_command(demo.demo)
main.add_command(chaos.chaos)
main.add_command(ui.ui)
main.add_command(deploy.replay_check)
main.add_command(deploy.doctor)
for command in (deploy.runs_migrate, deploy.runs_rollback, deploy.runs_export,
                deploy.runs_import):
    runs.runs.add_command(command)
main.add_command(workspace.workspace_group)
main.add_command(state.state_group)
