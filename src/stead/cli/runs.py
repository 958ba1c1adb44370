"""`stead start` and `stead runs ls|show|cancel|retry`: start runs, list and
inspect them (the journal as a timeline, every takeover), cancel them, and let
a run stopped as incompatible_checkpoint be claimed again."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import TYPE_CHECKING, Any

import click

from stead import errors, records
from stead.cli import common
from stead.client import RunInfo, listing
from stead.views import runs_view

if TYPE_CHECKING:
    from stead.app import App


def _task_id(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter("is empty: give a business key (e.g. order-123), or leave "
                                 "the option out", param_hint="'--task-id'")
    return value


def _shown(info: RunInfo) -> RunInfo:
    """`info` with the text a user chose (ids, names) made safe to print."""
    return dataclasses.replace(
        info, run_id=common.safe(info.run_id), workflow=common.safe(info.workflow),
        task_id=None if info.task_id is None else common.safe(info.task_id),
        lease_owner=None if info.lease_owner is None else common.safe(info.lease_owner),
    )


@click.command()
@common.app_argument
@click.argument("workflow")
@click.argument("args_json", metavar="[ARGS_JSON]", required=False)
@click.option("--kwargs", "kwargs_json", metavar="JSON",
              help="Keyword arguments as a JSON object.")
@click.option("--task-id", default=None, callback=lambda ctx, param, value: _task_id(value),
              help="Business key (e.g. order-123): starting it again returns the live run.")
@click.option("--version", "version", type=common.VERSION, default=None,
              help="Workflow version (default: the newest the app registers).")
@click.option("--intent", "intent_file", metavar="FILE", default=None,
              help="A JSON file with the run's intent: goal, instructions, plan_version, "
                   "grants, budget, reason.")
@click.option("--queue", default=None, help="Start it in this queue (declared by the app).")
@click.option("--priority", type=common.PRIORITY, default=None,
              help="Its priority in the queue: lower runs first.")
@click.option("--dedup-key", default=None,
              help="Starting it again in the queue returns the live run with this key.")
@click.option("--tenant", default=None,
              help="The tenant (customer) the run serves, e.g. acme.")
@click.option("--batch", type=common.COUNT, default=1000, show_default=True,
              help="With WORKFLOW '-': runs per transaction.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the run id.")
@click.pass_context
def start(ctx: click.Context, app_spec: str, workflow: str, args_json: str | None,
          kwargs_json: str | None, task_id: str | None, version: int | None,
          intent_file: str | None, queue: str | None, priority: int | None,
          dedup_key: str | None, tenant: str | None, batch: int, quiet: bool) -> None:
    """Start a run of WORKFLOW from MODULE:APP.

    ARGS_JSON is a JSON array of positional arguments, e.g. '[{"id": 4711}]'.
    A worker picks the run up. With --task-id, a live run of that task is
    returned instead of starting a second one.

    WORKFLOW '-' reads the runs to start from stdin, one JSON object a line:
    {"workflow": "triage", "args": ["T-1"], "task_id": "ticket-T-1",
    "queue": "refunds", "priority": 5} (also kwargs, version, dedup_key,
    intent, tenant). Every line is checked first: a bad one is named and nothing is
    started. Prints one JSON object a line: run_id, task_id, created.
    """
    if workflow == "-":
        given = [name for name, value in (
            ("ARGS_JSON", args_json), ("--kwargs", kwargs_json), ("--task-id", task_id),
            ("--version", version), ("--intent", intent_file), ("--queue", queue),
            ("--priority", priority), ("--dedup-key", dedup_key), ("--tenant", tenant))
            if value is not None]
        if given:
            raise click.UsageError(f"with WORKFLOW '-' each line says what {given[0]} would "
                                   "(its fields: workflow, args, kwargs, task_id, version, "
                                   "queue, priority, dedup_key, intent, tenant)")
        _start_lines(ctx, common.load_app(app_spec), batch, quiet)
        return
    app = common.load_app(app_spec)
    args = common.parse_json(args_json, "'ARGS_JSON'", list) if args_json is not None else []
    kwargs = (common.parse_json(kwargs_json, "'--kwargs'", dict) if kwargs_json is not None
              else {})
    intent = None if intent_file is None else common.read_intent(intent_file)

    async def go() -> Any:
        async with common.opened_client(common.database_url(ctx), app) as client:
            return await client.start(workflow, *args, task_id=task_id, version=version,
                                      intent=intent, queue=queue, priority=priority,
                                      dedup_key=dedup_key, tenant=tenant, **kwargs)

    info = _shown(common.run_async(go()))
    if quiet:
        click.echo(info.run_id)
    elif info.created:
        task = f", task {info.task_id}" if info.task_id else ""
        click.echo(f"started run {info.run_id} ({info.workflow}@{info.version}{task})")
    else:
        click.echo(f"run {info.run_id} already exists for task {info.task_id} "
                   f"(status {info.status}); not started again")


def _start_lines(ctx: click.Context, app: App, batch: int, quiet: bool) -> None:
    """`stead start MODULE:APP -`: the runs on stdin, JSON lines."""
    from stead import starts

    try:
        wanted = starts.from_lines(sys.stdin)
    except errors.InvalidStart as exc:
        raise click.ClickException(common.safe_lines(str(exc))) from None

    async def go() -> list[RunInfo]:
        async with common.opened_client(common.database_url(ctx), app) as client:
            return await client.start_many(wanted, batch=batch)

    for info in common.run_async(go()):
        if quiet:
            click.echo(common.safe(info.run_id))
        else:
            click.echo(json.dumps({"run_id": info.run_id, "task_id": info.task_id,
                                   "created": info.created, "status": info.status}))


@click.group()
def runs() -> None:
    """List, inspect and cancel runs."""


@runs.command("ls")
@click.option("--status", type=click.Choice([s.value for s in records.RunStatus]), default=None,
              help="Only runs with this status.")
@click.option("--workflow", default=None, help="Only runs of this workflow.")
@click.option("--tenant", default=None, help="Only runs of this tenant.")
@click.option("--limit", type=common.COUNT, default=50, show_default=True,
              help="At most this many runs, newest first.")
@click.option("--stranded", is_flag=True,
              help="Only runnable runs whose version no worker serves (see --grace).")
@common.grace_option
@common.json_option
@click.pass_context
def runs_ls(ctx: click.Context, status: str | None, workflow: str | None,
            tenant: str | None, limit: int, stranded: bool, grace: float,
            as_json: bool) -> None:
    """List runs, newest first (--stranded: oldest first)."""
    db = common.database_url(ctx)
    common.require_database(db)
    if stranded and status is not None:
        raise click.UsageError("--stranded lists runnable runs: leave --status out")

    async def go() -> list[RunInfo]:
        async with common.opened_store(db) as store:
            return await listing.list_runs(store, status=status, workflow=workflow,
                                           limit=limit, stranded=stranded, grace=grace,
                                           tenant=tenant)

    infos = common.run_async(go())
    if as_json:
        click.echo(json.dumps([runs_view.run_json(i) for i in infos], indent=2))
    elif stranded:
        common.echo("\n".join(runs_view.stranded_line(_shown(i)) for i in infos)
                    or "no stranded runs")
    else:
        common.echo(runs_view.render_runs([_shown(i) for i in infos]))


@runs.command("show", short_help="Show a run, its journal as a timeline, and its resumes.")
@common.run_argument
@common.json_option
@click.pass_context
def runs_show(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """Show a run: status, result or error, the journal as a timeline, and
    every takeover (who resumed it, at which epoch, from where, what was reused),
    and the operator actions taken or refused on it (who, why, outcome)."""
    # What only `show` draws, imported here so that `runs ls` does not pay for it.
    from stead.operator import audit
    from stead.views import context_view, timeline, workspace_view

    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> Any:
        async with common.opened_client(db) as client:
            info = await client.get(run_id)
            return (info, await client.journal(run_id), await client.resumes(run_id),
                    await client.intents(run_id), await client.lineage(run_id),
                    await client.migrations(run_id), client.store.clock.now(),
                    await client.snapshots(run_id), await client.store.list_actions(run_id))

    (info, journal, resumes, intents, lineage, migrated, now, snapshots,
     actions) = common.run_async(go())
    if as_json:
        shown = timeline.show_json(info, journal, resumes)
        shown["intents"] = [dataclasses.asdict(i) for i in intents]
        shown["lineage"] = timeline.lineage_json(lineage)
        shown["migrations"] = [dataclasses.asdict(m) for m in migrated]
        shown["snapshots"] = [workspace_view.snapshot_json(s) for s in snapshots]
        shown["operator_actions"] = audit.audit_json(actions)
        click.echo(json.dumps(shown, indent=2))
    else:
        common.echo(timeline.render_run(_shown(info), journal, resumes, now=now))
        if lineage.parent is not None or lineage.children:
            common.echo("\n".join(timeline.lineage_lines(lineage)))
        if intents or any(r.details.intent for r in resumes):
            common.echo(context_view.render(intents, resumes, journal, now))
        if migrated:
            common.echo(timeline.render_migrations(info.workflow, migrated))
        workspaces = workspace_view.render(journal, snapshots, resumes)
        if workspaces:
            common.echo(workspaces)
        if actions:
            common.echo(audit.render(actions))


@runs.command("cancel")
@common.run_argument
@click.pass_context
def runs_cancel(ctx: click.Context, run_id: str) -> None:
    """Cancel a live run and its live child runs. A running run is asked
    to: it stops at its next call boundary, once an effect in flight has its
    outcome journaled. The journal is kept."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> Any:
        async with common.opened_client(db) as client:
            before = await client.get(run_id)
            return before, await client.cancel(run_id)

    before, after = common.run_async(go())
    if before.status == records.RunStatus.CANCELLED:
        click.echo(f"run {common.safe(run_id)} was already cancelled")
    elif after.cancel_requested and after.status == records.RunStatus.RUNNING:
        click.echo(f"asked run {common.safe(run_id)} to cancel: its worker ends it at its next "
                   "call boundary")
    elif after.status != records.RunStatus.CANCELLED:
        raise click.ClickException(
            f"run {common.safe(run_id)} already ended as {after.status}; there is nothing to "
            "cancel"
        )
    else:
        click.echo(f"cancelled run {common.safe(run_id)} (was {before.status})")


@runs.command("retry")
@common.run_argument
@click.pass_context
def runs_retry(ctx: click.Context, run_id: str) -> None:
    """Let a run stopped as incompatible_checkpoint be claimed again, after
    deploying code that fits its journal (the old version registered next to
    the new one, or the change rolled back). If it still does not fit, it stops
    again; nothing in the journal is changed."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> Any:
        async with common.opened_client(db) as client:
            return await client.retry(run_id)

    info = _shown(common.run_async(go()))
    click.echo(f"run {info.run_id} is claimable again (epoch {info.epoch}): a worker hosting "
               f"{info.workflow}@{info.version} replays it")


@runs.command("fork")
@common.run_argument
@click.option("--at", "at", type=common.POSITION, default=None, metavar="SEQ",
              help="Keep the first SEQ records of RUN's journal (0: none; default: all of "
                   "them).")
@common.json_option
@click.pass_context
def runs_fork(ctx: click.Context, run_id: str, at: int | None, as_json: bool) -> None:
    """Start a new run that replays the first SEQ records of RUN's journal
    and goes on live from there (its own task state, as the prefix last saw
    it; its own waits; new effect keys). Refused past an effect whose outcome
    is unknown at that position. RUN is untouched; both runs show the link.

    Without --at the whole journal is kept: once the code a failed run met is
    fixed, this is how it goes on from where it failed, its journaled effects
    (a refund already sent) replayed, not sent again."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> tuple[Any, int]:
        async with common.opened_client(db) as client:
            kept = at if at is not None else (await client.journal_size(run_id))[0]
            return await client.fork(run_id, at=kept), kept

    forked, kept = common.run_async(go())
    if as_json:
        click.echo(json.dumps({**runs_view.run_json(forked), "forked_from": run_id,
                               "at": kept}, indent=2))
        return
    info = _shown(forked)
    click.echo(f"forked run {common.safe(run_id)} at {kept}: run {info.run_id} "
               f"({info.workflow}@{info.version}); a worker hosting it replays the "
               f"{kept} record(s) and goes on live")


@runs.command("resume")
@common.run_argument
@common.decision_options
@click.option("--intent", "intent_file", metavar="FILE", default=None,
              help="A JSON file with the intent to resume under (default: the one in force).")
@click.pass_context
def runs_resume(ctx: click.Context, run_id: str, by: str, why: str,
                intent_file: str | None) -> None:
    """Resume a paused run, recording who decided and why (and, with
    --intent, the intent it goes on under). Its policy is asked again."""
    db = common.database_url(ctx)
    common.require_database(db)
    intent = None if intent_file is None else common.read_intent(intent_file)

    async def go() -> Any:
        async with common.opened_client(db) as client:
            return await client.resume(run_id, by=by, why=why, intent=intent)

    info = _shown(common.run_async(go()))
    click.echo(f"resumed run {info.run_id} (epoch {info.epoch}): a worker hosting "
               f"{info.workflow}@{info.version} takes it over")


@runs.command("revise", short_help="Revise the intent of a running, waiting or paused run.")
@common.run_argument
@click.option("--goal", default=None, help="The new goal.")
@click.option("--instructions-file", "instructions_file", metavar="FILE", default=None,
              help="A file with the new instructions (stored as their SHA-256).")
@click.option("--grants", "grants_json", metavar="JSON", default=None,
              help="The run's grants from now on, a JSON array of grants as in an intent "
                   "file; each narrows one it holds, a tool left out is withdrawn.")
@common.decision_options
@click.pass_context
def runs_revise(ctx: click.Context, run_id: str, goal: str | None,
                instructions_file: str | None, grants_json: str | None, by: str,
                why: str) -> None:
    """Revise RUN's intent while it runs, waits or is paused: a new goal, new
    instructions, grants narrowed. Recorded as a new version with who and why;
    its effects are checked against it at once, and its next resume judges
    against it (a paused run stays paused: stead runs resume RUN)."""
    db = common.database_url(ctx)
    common.require_database(db)
    instructions = None if instructions_file is None else common.read_text(
        instructions_file, "'--instructions-file'")
    grants = None if grants_json is None else common.read_grants(grants_json, "'--grants'")

    async def go() -> records.IntentRow:
        async with common.opened_client(db) as client:
            return await client.revise(run_id, by=by, why=why, goal=goal,
                                       instructions=instructions, grants=grants)

    row = common.run_async(go())
    click.echo(f"revised the intent of run {common.safe(run_id)}: version {row.version}, "
               f"by {common.safe(row.author)}; its next resume judges against it")


@runs.command("terminate")
@common.run_argument
@common.decision_options
@click.pass_context
def runs_terminate(ctx: click.Context, run_id: str, by: str, why: str) -> None:
    """End a paused run as revalidation_failed, recording who and why."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> Any:
        async with common.opened_client(db) as client:
            return await client.terminate(run_id, by=by, why=why)

    info = _shown(common.run_async(go()))
    click.echo(f"terminated run {info.run_id}: {info.status}")
