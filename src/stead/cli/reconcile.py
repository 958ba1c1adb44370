"""`stead reconcile RUN EFFECT`: a person decides what happened to an effect
whose outcome stead cannot know, and the run continues from that decision."""

from __future__ import annotations

import getpass
import json
import os
from typing import Any

import click

from stead.cli import common


def _any_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=what) from exc
    except RecursionError as exc:
        raise click.BadParameter("JSON nested too deeply; flatten it", param_hint=what) from exc


def _current_user() -> str:
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (OSError, KeyError) as exc:  # no login name in this environment
        raise click.UsageError("cannot tell who you are; say who decides with --by NAME") \
            from exc


@click.command(short_help="Decide what happened to an effect whose outcome is unknown.")
@common.run_argument
@click.argument("effect")
@click.option("--happened", "happened_json", metavar="JSON",
              help="It happened; JSON is its result, as the effect function would have "
                   "returned it (the workflow continues with it).")
@click.option("--not-happened", is_flag=True,
              help="It did not happen: the run sends it, with the same key.")
@click.option("--compensate", "compensate_json", metavar="JSON",
              help="It happened and was undone; JSON says how. The workflow sees "
                   "stead.EffectCompensated.")
@click.option("--by", metavar="NAME", default=None,
              help="Who decides, kept with the decision (default: the current OS user).")
@click.option("--why", metavar="TEXT", default="", help="Why, kept with the decision.")
@click.pass_context
def reconcile(ctx: click.Context, run_id: str, effect: str, happened_json: str | None,
              not_happened: bool, compensate_json: str | None, by: str | None,
              why: str) -> None:
    """Decide what happened to EFFECT of RUN, a run stopped as outcome_unknown.

    stead stops a run when it cannot tell whether an effect reached the outside
    world (the worker died after the intent was journaled, and the effect is not
    idempotent and has no check). Find out outside, looking it up by the
    effect's key (`stead runs show RUN` shows it), then give exactly one of
    --happened JSON, --not-happened or --compensate JSON. The decision is
    journaled with who made it and why, and a worker continues the run from it.

    EFFECT is the effect's name, or its key when several effects share the name.
    """
    given = [happened_json is not None, not_happened, compensate_json is not None]
    if sum(given) != 1:
        raise click.UsageError(
            "give exactly one decision: --happened JSON, --not-happened or --compensate JSON"
        )
    kwargs: dict[str, Any] = {}
    if happened_json is not None:
        kwargs["happened"] = _any_json(happened_json, "'--happened'")
    elif compensate_json is not None:
        kwargs["compensate"] = _any_json(compensate_json, "'--compensate'")
    else:
        kwargs["not_happened"] = True
    who = by if by is not None else _current_user()
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> Any:
        async with common.opened_client(db) as client:
            return await client.reconcile(run_id, effect, by=who, why=why, **kwargs)

    info = common.run_async(go())
    run_id, effect, who = common.safe(run_id), common.safe(effect), common.safe(who)
    because = f": {common.safe(why)}" if why else ""
    if "happened" in kwargs:
        click.echo(f"run {run_id}: effect {effect} happened, with result "
                   f"{json.dumps(kwargs['happened'])} (decided by {who}{because})")
        click.echo("the run continues from that result")
    elif "compensate" in kwargs:
        click.echo(f"run {run_id}: effect {effect} was compensated: "
                   f"{json.dumps(kwargs['compensate'])} (decided by {who}{because})")
        click.echo("the run continues; the workflow sees stead.EffectCompensated")
    else:
        click.echo(f"run {run_id}: effect {effect} did not happen (decided by {who}{because})")
        click.echo("the run continues: it sends the effect, with the same key")
    click.echo(f"status {info.status}: a worker hosting {common.safe(info.workflow)}@"
               f"{info.version} "
               "picks it up")
