"""The `stead` command: run a worker, start runs, inspect and cancel them,
reconcile an effect whose outcome is unknown, answer waiting runs, migrate the
database, manage the keys that sign wait tokens, watch a run survive a crash
(`stead demo`), crash your own workflows at every boundary (`stead chaos`)
and serve the operator's dashboard and event webhook (`stead ui`).

This module builds the root group and names its commands, one module a group;
what they share (the database URL, loading `module:app`, opening a client,
error handling) is in `stead.cli.common`. Nothing imports this module back.
Commands reach the store only through `stead.Client`, except `worker`, which
runs a `stead.Worker`, `db migrate` and `db prune`, which open the store to
migrate it and to delete old runs (`stead.retention`), and `runs ls`, which
lists with `stead.client.listing` (what `Client.list_runs` calls) so that it
loads none of the client's other parts.
"""

from __future__ import annotations

import click

from stead.cli import common

__all__ = ["main"]

# Each command of the root group: where it is, and its line in `stead --help`
# (tests/test_cli.py keeps each line equal to the command's own help). A
# command's module is imported only when that command runs, so `stead --help`
# imports none of them, and `stead runs ls` only `stead.cli.runs`.
COMMANDS = {
    "approve": common.Place("events:approve",
                            "Approve a waiting run: deliver an approval event."),
    "blobs": common.Place("blobs:blobs_group",
                          "The blob store of large values: collect orphans (gc)."),
    "chaos": common.Place("chaos:chaos", "Kill a worker at every boundary of a workflow and "
                                         "check each recovery."),
    "db": common.Place("db:db_group", "The database: schema migrations, retention."),
    "demo": common.Place("demo:demo",
                         "Watch an agent run survive a real worker crash and resume."),
    "doctor": common.Place("deploy:doctor", "Say what needs a person: stranded runs (no worker "
                                            "serves their version), runs stopped for a "
                                            "decision, the workers heard from with the stead "
                                            "release each runs, each alive, dead or unknown "
                                            "by the test claimers use (its process on this "
                                            "machine, its presence lock on PostgreSQL "
                                            "elsewhere), and the database's schema version."),
    "events": common.Place("events:events", "Events delivered to runs, with their verdicts."),
    "grants": common.Place("grants:grants_group",
                           "Renew or deny the grants that let a run call its tools."),
    "keys": common.Place("keys:keys_group",
                         "The keys that sign wait tokens (never kept in the database)."),
    "reconcile": common.Place("reconcile:reconcile",
                              "Decide what happened to an effect whose outcome is unknown."),
    "reject": common.Place("events:reject", "Decline a waiting run: deliver a rejection event."),
    "replay-check": common.Place("deploy:replay_check",
                                 "Replay stored histories against new code."),
    "runs": common.Place("runs:runs", "List, inspect and cancel runs.",
                         adds=("deploy:runs_migrate", "deploy:runs_rollback",
                               "deploy:runs_export", "deploy:runs_import")),
    "streams": common.Place("streams:streams_group",
                            "End users' stream tokens: take them back before they expire."),
    "start": common.Place("runs:start", "Start a run of WORKFLOW from MODULE:APP."),
    "status": common.Place("status:status", "Is the fleet healthy? The live workers (by the "
                                            "test claimers use), the queues with their depth "
                                            "and oldest age, the human waits, the effects "
                                            "whose outcome is unknown, the stranded runs and "
                                            "the takeovers of the last hour, in one screen."),
    "state": common.Place("state:state_group", "Read and change a task's state (its versioned "
                                               "facts) from outside a run."),
    "tasks": common.Place("tasks:tasks_group",
                          "A task's runs as a whole: forget its personal data."),
    "tenants": common.Place("tenants:tenants_group",
                            "Tenants' spend budgets and quotas, and the model price table."),
    "ui": common.Place("ui:ui", "Serve the operator's dashboard and the event webhook."),
    "waits": common.Place("events:waits_group", "Durable waits: what runs are waiting for."),
    "worker": common.Place("worker:worker", "Run a worker for the workflows of MODULE:APP."),
    "workers": common.Place("workers:workers_group",
                            "The workers of the fleet (`stead status` lists the live ones)."),
    "workspace": common.Place("workspace:workspace_group", "Look at the directories runs saved "
                                                           "(`stead runs show RUN` lists them)."),
}


@click.group(cls=common.Root, places=COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"]})
@common.database_option
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=common.print_version,
              help="Show the version, and the schema version it needs, and exit.")
def main(db: str) -> None:
    """stead: durable execution for AI agents. Resume, don't rerun.

    Run workers for your app, start runs, and inspect what each run journaled
    and how it was resumed. Try `stead demo` to watch a run survive a crash.
    """
