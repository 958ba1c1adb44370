"""Deploying new code under running workflows: `stead replay-check`, `stead
doctor`, and `stead runs migrate|rollback|export|import` (added to the `runs`
group by `stead.cli`).

    stead replay-check MODULE:APP [--from DIR] [--runs N]   # exit 1: runs it cannot interpret
    stead runs export RUN > run.json ; stead runs import run.json
    stead runs migrate RUN --app MODULE:APP --to 2 [--dry-run] ; stead runs rollback RUN
    stead doctor                                            # stranded runs, workers, stops
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from stead import errors, records
from stead.cli import common
from stead.views import runs_view

if TYPE_CHECKING:
    # Types only (exports and paths are imported where an export is read):
    # `stead runs ls` imports this module with the `runs` group, and needs none.
    from stead.app import App
    from stead.client import MigrationReport, RunInfo
    from stead.exports import StoredRun


# -- replay-check ------------------------------------------------------------------------
def _read_exports(folder: str) -> tuple[list[StoredRun], list[str]]:
    """The exports in `folder`, and one line for each file that is not one."""
    from pathlib import Path

    from stead.exports import StoredRun

    root = Path(folder)
    if not root.is_dir():
        raise click.BadParameter(f"{folder!r} is not a folder", param_hint="'--from'")
    files = sorted(root.glob("*.json"))
    if not files:
        raise click.BadParameter(f"no *.json run exports in {folder!r} (stead runs export "
                                 "RUN > DIR/RUN.json)", param_hint="'--from'")
    found, bad = [], []
    for path in files:
        try:
            found.append(StoredRun.read(path))
        except errors.InvalidInput as exc:
            bad.append(common.safe(str(exc)))
    return found, bad


async def _live_histories(db: str, app: App, limit: int) -> list[StoredRun]:
    async with common.opened_client(db, app) as client:
        live = [r for r in await client.list_runs(limit=100_000) if not r.done]
        return [await client.export_run(r.run_id) for r in live[:limit]]


@click.command("replay-check", short_help="Replay stored histories against new code.")
@common.app_argument
@click.option("--from", "source", metavar="DIR", default=None,
              help="Replay the run exports (*.json) in DIR instead of the database's live runs.")
@click.option("--runs", "limit", type=common.COUNT, default=1000, show_default=True,
              metavar="N", help="At most this many runs.")
@common.json_option
@click.pass_context
def replay_check(ctx: click.Context, app_spec: str, source: str | None, limit: int,
                 as_json: bool) -> None:
    """Replay stored histories against the code of MODULE:APP, writing nothing
    and calling nothing: the live runs of the database (--db), or the exports
    in --from DIR. Prints each run the code cannot interpret, with the
    position and the call expected and made, and exits 1 if there is any:
    run it in CI before a deploy. Each step whose code changed since it was
    journaled is listed with what a takeover would do with it
    (App(changed_steps=)); under "stop" that is a run it cannot interpret."""
    # Only this command replays: `runs ls`, which shares the `runs` group
    # with this module's commands, does not load the dry replays.
    from stead import dryrun

    app = common.load_app(app_spec)
    unread: list[str] = []
    if source is not None:
        runs, unread = _read_exports(source)
        runs = runs[:limit]
    else:
        db = common.database_url(ctx)
        common.require_database(db)
        runs = common.run_async(_live_histories(db, app, limit))
    results = common.run_async(dryrun.replay_all(app, runs))
    if as_json:
        click.echo(json.dumps([{"run_id": r.run_id, "code": r.code, "reused": r.reused,
                                "frontier": r.frontier, "changed_steps": list(r.changed_steps),
                                "finding": None if r.finding is None else vars(r.finding)}
                               for r in results]
                              + [{"unreadable": line} for line in unread], indent=2))
    else:
        common.echo("\n".join([*unread, dryrun.summary(results)])
                    + (f"\n{len(unread)} file(s) could not be read" if unread else ""))
    if unread or any(r.finding is not None for r in results):
        ctx.exit(1)


# -- doctor ------------------------------------------------------------------------------
@click.command()
@common.grace_option
@click.pass_context
def doctor(ctx: click.Context, grace: float) -> None:
    """Say what needs a person: stranded runs (no worker serves their
    version), runs stopped for a decision, the workers heard from with the
    stead release each runs, each alive, dead or unknown by the test claimers
    use (its process on this machine, its presence lock on PostgreSQL
    elsewhere), and the database's schema version. Exits 1 if a run is
    stranded, or if a live worker runs code the schema has moved past (it
    stops claiming)."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> Any:
        async with common.opened_client(db) as client:
            stopped = {s: await client.list_runs(status=s, limit=1000)
                       for s in sorted(records.STOPPED)}
            versions = client.store.database.versions
            return (await client.list_runs(stranded=True, grace=grace, limit=1000),
                    stopped, await client.workers(), await client.store.worker_liveness(),
                    client.store.clock.now(), None if versions is None else versions.version)

    stranded, stopped, hosts, judged, now, schema = common.run_async(go())
    lines = []
    heard = {h.worker_id for h in hosts if h.stopped_at is None and now - h.seen_at <= grace}
    served: dict[str, set[str]] = {}
    releases: dict[str, tuple[str | None, int | None]] = {}
    for h in hosts:
        if h.worker_id in heard:
            served.setdefault(h.worker_id, set()).add(
                h.code if h.role == records.HostRole.HOSTS else f"{h.code} (migrates)")
            releases[h.worker_id] = (h.stead_version, h.schema_version)
    (schema_line, *fleet), outdated = _fleet_lines(releases, schema)
    lines.append(schema_line)
    verdicts = {w.worker_id: w for w in judged}
    unrecorded = records.WorkerLiveness("", records.Liveness.UNKNOWN, "no process recorded")
    said = {w: verdicts.get(w, unrecorded) for w in heard}
    counts = ", ".join(f"{n} {v}" for v in records.Liveness
                       if (n := sum(1 for j in said.values() if j.verdict == v)))
    lines.append(f"workers heard from in the last {grace:g}s: {len(heard)}"
                 + (f" ({counts})" if counts else ""))
    lines += [f"  {w}: {', '.join(sorted(codes))} ({_release(*releases[w])})"
              f"  [{said[w].verdict}: {said[w].reason}"
              + ("; its leases end at the next claim" if said[w].verdict == "dead" else "")
              + "]" for w, codes in sorted(served.items())]
    lines += fleet
    lines.append(f"stranded runs: {len(stranded)}")
    lines += [f"  {runs_view.stranded_line(i)}" for i in stranded]
    if stranded:
        lines.append("  start a worker hosting that version, register a migration to a "
                     "version you host (stead runs migrate), or cancel the run")
    for status, infos in stopped.items():
        if infos:
            lines.append(f"runs stopped as {status}: {len(infos)} (stead runs ls --status "
                         f"{status})")
    common.echo("\n".join(lines))
    if stranded or outdated:
        ctx.exit(1)


def _release(stead_version: str | None, schema_version: int | None) -> str:
    if stead_version is None:
        return "stead before 0.2.0"
    return f"stead {stead_version}, schema {schema_version}"


def _fleet_lines(releases: dict[str, tuple[str | None, int | None]],
                 schema: int | None) -> tuple[list[str], bool]:
    """The schema line, a line for a mixed fleet, and one for each release the
    schema moved past (a breaking migration newer than its code); whether any
    such worker is live."""
    from stead import release
    from stead.store import schema_versions

    code = schema_versions.known("sqlite")
    lines = [f"schema: the database is at {schema}; this stead ({release.__version__}) needs "
             f"{code[-1].version}"]
    kinds = sorted({_release(*r) for r in releases.values()})
    if len(kinds) > 1:
        lines.append(f"a mixed fleet: {len(kinds)} releases run ({'; '.join(kinds)})")
    outdated = False
    for kind, (_version, needs) in sorted({_release(*r): r for r in releases.values()}.items()):
        broken = [] if schema is None else schema_versions.breaking_since(needs, schema, code)
        if broken:
            outdated = True
            lines.append(f"  workers on {kind} are past their window: {broken[0].label} is "
                         "breaking; they stop claiming. Upgrade them (stead db migrate "
                         "refuses breaking migrations while such workers live)")
    return lines, outdated


# -- runs migrate | rollback | export | import -----------------------------------------------
def _render_report(report: MigrationReport, dry_run: bool) -> str:
    done = "would move" if dry_run else "moved"
    lines = [f"run {report.run_id}: {done} from version {report.from_version} to "
             f"{report.to_version}; journal {report.records_before} -> "
             f"{report.records_after} record(s); input {json.dumps(report.new_input)}"]
    replayed = report.replay
    if replayed.finding is None:
        lines.append(f"version {report.to_version} replays the migrated journal "
                     f"({replayed.reused} record(s) reused)"
                     + (f"; it goes on live at {replayed.frontier}" if replayed.frontier
                        else ""))
    else:
        lines.append(f"version {report.to_version} cannot replay it: "
                     f"{replayed.finding.line()}; nothing was applied")
    for m in report.applied:
        lines.append(f"migration {m.number} recorded (by {m.author}, epoch {m.epoch}); "
                     f"undo it with: stead runs rollback {report.run_id}")
    return "\n".join(lines)


@click.command("migrate")
@common.run_argument
@click.option("--app", "app_spec", metavar="MODULE:APP", required=True, envvar="STEAD_APP",
              help="The app that registers the migration (@app.migration).")
@click.option("--to", "to", type=common.VERSION, required=True,
              help="The workflow version to move the run to.")
@click.option("--dry-run", is_flag=True, help="Say what it would do; change nothing.")
@click.option("--by", metavar="NAME", default=None,
              help="Who migrates, kept with the migration (default: the current OS user).")
@click.pass_context
def runs_migrate(ctx: click.Context, run_id: str, app_spec: str, to: int, dry_run: bool,
                 by: str | None) -> None:
    """Move RUN to version --to with the app's registered migration. The
    migrated journal is replayed dry against the new version first; the old
    journal is kept (stead runs rollback RUN restores it). The run must not
    be held by a worker."""
    app = common.load_app(app_spec)
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> MigrationReport:
        async with common.opened_client(db, app) as client:
            return await client.migrate(run_id, to=to, by=by, dry_run=dry_run)

    report = common.run_async(go())
    common.echo(_render_report(report, dry_run))
    if not report.ok:
        ctx.exit(1)


@click.command("rollback")
@common.run_argument
@click.option("--by", metavar="NAME", default=None,
              help="Who rolls back, kept with it (default: the current OS user).")
@click.pass_context
def runs_rollback(ctx: click.Context, run_id: str, by: str | None) -> None:
    """Undo RUN's last migration: its old journal, version and input come
    back, as long as nothing was journaled after the migration."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> RunInfo:
        async with common.opened_client(db) as client:
            return await client.rollback(run_id, by=by)

    info = common.run_async(go())
    click.echo(f"run {common.safe(info.run_id)} is back on {common.safe(info.code)} "
               f"(epoch {info.epoch}, {info.status})")


@click.command("export")
@common.run_argument
@click.pass_context
def runs_export(ctx: click.Context, run_id: str) -> None:
    """Print RUN's history as JSON (its row, journal, waits and task state;
    token hashes only): `stead runs export RUN > run.json`."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> StoredRun:
        async with common.opened_client(db) as client:
            # With encryption on, the payloads leave sealed, as they are stored.
            return await client.store.seal_export(await client.export_run(run_id))

    click.echo(common.run_async(go()).dumps())


@click.command("import")
@click.argument("files", metavar="FILE...", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False))
@click.pass_context
def runs_import(ctx: click.Context, files: tuple[str, ...]) -> None:
    """Store runs exported with `stead runs export` in this database (to
    replay, inspect or debug them here). Each file is checked whole before
    anything of it is stored, and stored in one transaction: a file that is
    not a valid export, or whose run id exists, stores nothing and is named
    in one line; the others are imported. Exits 1 if any file failed."""
    db = common.database_url(ctx)

    from stead import exports
    from stead.exports import StoredRun

    async def go() -> list[str]:
        failed = []
        async with common.opened_client(db) as client:
            for path in files:
                try:
                    data = await client.store.open_export(exports.read_json(path))
                    info = await client.import_run(StoredRun.from_json(data, source=path))
                except errors.StoreUnavailable:
                    raise  # no file could be imported now: say so once
                except errors.SteadError as exc:
                    # A read error names the file already; the store's does not.
                    line = (f"{exc}" if str(exc).startswith(path) else f"{path}: {exc}"
                            ) + " (nothing of it was stored)"
                    failed.append(line)
                    click.echo(common.safe(line), err=True)
                    continue
                click.echo(f"imported run {common.safe(info.run_id)} "
                           f"({common.safe(info.code)}, {info.status})")
        return failed

    failed = common.run_async(go())
    if failed:
        click.echo(f"{len(failed)} of {len(files)} file(s) not imported: fix or leave them "
                   "out, then run stead runs import again for those", err=True)
        ctx.exit(1)
