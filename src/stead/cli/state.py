"""`stead state show|set TASK`: a task's facts, read and changed from outside
any run. A change is a compare-and-set on the version (`--expect-version`),
recorded with who and why; a run of the task sees it at its next read, a
waiting or paused one when it resumes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from stead import records
from stead.cli import common
from stead.workflow.state import Facts


@click.group("state")
def state_group() -> None:
    """Read and change a task's state (its versioned facts) from outside a run."""


def _task_argument(f: Any) -> Any:
    return click.argument("task_id", metavar="TASK")(f)


@state_group.command("show")
@_task_argument
@click.option("--history", type=click.IntRange(min=1), default=10, show_default=True,
              help="How many versions to list, newest first.")
@common.json_option
@click.pass_context
def state_show(ctx: click.Context, task_id: str, history: int, as_json: bool) -> None:
    """Print TASK's facts, their version, and who wrote the last versions."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> tuple[Facts, list[records.StateRow]]:
        async with common.opened_client(db) as client:
            return (await client.task_state(task_id),
                    await client.state_history(task_id, limit=history))

    facts, versions = common.run_async(go())
    if as_json:
        click.echo(json.dumps({"task_id": task_id, "version": facts.version,
                               "data": facts.data, "history": [_version(v) for v in versions]},
                              sort_keys=True))
        return
    common.echo(f"task {task_id}: version {facts.version}\n"
                + json.dumps(facts.data, indent=2, sort_keys=True))
    for v in versions:
        at = "" if v.updated_at is None else datetime.fromtimestamp(v.updated_at, UTC).isoformat(
            timespec="seconds")
        who = f"by {v.author}: {v.why}" if v.author is not None else f"by run {v.run_id}"
        common.echo(f"  v{v.version} {at} {who}")


def _version(v: records.StateRow) -> dict[str, Any]:
    return {"version": v.version, "at": v.updated_at, "run_id": v.run_id, "by": v.author,
            "why": v.why, "data": json.loads(v.data)}


@state_group.command("set")
@_task_argument
@click.option("--expect-version", type=click.IntRange(min=0), required=True,
              help="The version the change was decided on (stead state show TASK); a "
                   "state that moved since is not changed.")
@click.option("--patch", "patch_json", metavar="JSON", required=True,
              help='A JSON merge patch: {"stock": 3} sets a key, {"hold": null} deletes one.')
@common.decision_options
@click.pass_context
def state_set(ctx: click.Context, task_id: str, expect_version: int, patch_json: str, by: str,
              why: str) -> None:
    """Change TASK's facts if they are still at --expect-version, recording
    who and why."""
    db = common.database_url(ctx)
    common.require_database(db)
    patch = common.parse_json(patch_json, "'--patch'", dict)

    async def go() -> Facts:
        async with common.opened_client(db) as client:
            return await client.set_state(task_id, patch, expect_version=expect_version,
                                          by=by, why=why)

    facts = common.run_async(go())
    click.echo(f"task {common.safe(task_id)} is at version {facts.version} (by "
               f"{common.safe(by)})")
