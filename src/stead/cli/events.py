"""`stead approve`, `stead reject`, `stead events ls`, `stead waits ls`: the
human side of the resume contract, from the command line."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from typing import Any

import click

from stead.cli import common
from stead.records import EventRow, WaitRow, WaitState
from stead.views import runs_view
from stead.workflow import waits


def _when(t: float | None) -> str:
    if t is None:
        return "never"
    return runs_view.clock_time(t)


def _event_id(run_id: str, wait: str, token: str, payload: Any, bind: Any) -> str:
    """The same decision typed twice is one event: the second is a Duplicate.
    A corrected one (other payload or bound values) is a new event."""
    basis = json.dumps([run_id, wait, token, payload, bind], sort_keys=True)
    return "cli-" + hashlib.sha256(basis.encode()).hexdigest()[:16]


def _decide(ctx: click.Context, run_id: str, wait_id: str | None, kind: str | None,
            token: str, payload: dict[str, Any], bind_json: str | None,
            event_id: str | None) -> None:
    if (wait_id is None) == (kind is None):
        raise click.UsageError("name the wait: --wait ID, or --kind KIND for the run's open "
                               "wait of that kind")
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> tuple[waits.Delivery, dict[str, Any]]:
        async with common.opened_client(db) as client:
            await client.get(run_id)  # no run: say so, and store nothing
            if bind_json is not None:
                bind = common.parse_json(bind_json, "'--bind'", dict)
            else:  # approve what the wait is bound to, and say so
                found = [w for w in await client.waits(run_id=run_id, state=None, limit=1000)
                         if w.wait_id == wait_id or (wait_id is None and w.kind == kind)]
                bind = json.loads(found[-1].bind) if found else {}
            eid = event_id or _event_id(run_id, wait_id or kind or "", token, payload, bind)
            verdict = await client.deliver(run_id, wait_id=wait_id, kind=kind, event_id=eid,
                                           payload=payload, bind=bind, token=token)
            return verdict, bind

    verdict, bind = common.run_async(go())
    shown = common.safe(", ".join(f"{k}={json.dumps(v)}" for k, v in bind.items())
                        or "nothing")
    event, run = common.safe(verdict.event_id), common.safe(run_id)
    if isinstance(verdict, waits.Accepted):
        click.echo(f"Accepted: event {event} resumes run {run} at wait "
                   f"{common.safe(verdict.wait_id)} (bound to {shown})")
    elif isinstance(verdict, waits.Duplicate):
        click.echo(f"Duplicate: event {event} was delivered before "
                   f"(accepted for wait {common.safe(verdict.wait_id)}); nothing happened again")
    else:
        raise click.ClickException(f"{common.safe(verdict)} — event {event} stored; "
                                   f"see `stead events ls {run}`")


def _token(token: str | None, token_file: str | None) -> str:
    """The wait's token from --token-file, stdin (--token -), --token or
    STEAD_TOKEN: the first two keep it out of `ps` and shell history."""
    if token_file is not None and token is not None and token != os.environ.get("STEAD_TOKEN"):
        raise click.UsageError("give the token once: --token or --token-file")
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as f:
                text = f.read().strip()
        except OSError as exc:
            raise click.BadParameter(f"cannot read it: {exc}", param_hint="'--token-file'"
                                     ) from exc
    elif token == "-":
        text = sys.stdin.read().strip()
    else:
        text = (token or "").strip()
    if not text:
        raise click.UsageError("the wait's token is needed: --token-file PATH, --token - "
                               "(read from stdin) or STEAD_TOKEN")
    return text


def _decision_options(f: Any) -> Any:
    for option in reversed([
        click.option("--wait", "wait_id", metavar="ID", help="The wait's id (stead waits ls)."),
        click.option("--kind", metavar="KIND", help="Or: the run's open wait of this kind."),
        click.option("--token", metavar="T", envvar="STEAD_TOKEN", show_envvar=True,
                     help="The wait's token, as it was sent to the person deciding. '-' "
                          "reads it from stdin. A value given here is visible to other "
                          "users (ps) and kept in shell history: prefer --token-file, "
                          "--token - or STEAD_TOKEN."),
        click.option("--token-file", type=click.Path(dir_okay=False, readable=True),
                     metavar="PATH", help="Read the wait's token from this file."),
        click.option("--bind", "bind_json", metavar="JSON",
                     help="The values the decision is about (default: those the wait is "
                          "bound to, printed back)."),
        click.option("--event-id", metavar="ID",
                     help="The event's id (default: derived from the decision, so the same "
                          "command twice is a Duplicate)."),
    ]):
        f = option(f)
    return f


@click.command(short_help="Approve a waiting run: deliver an approval event.")
@common.run_argument
@_decision_options
@click.option("--payload", "payload_json", metavar="JSON", default="{}",
              help="More fields for the event's payload (an object).")
@click.pass_context
def approve(ctx: click.Context, run_id: str, wait_id: str | None, kind: str | None,
            token: str | None, token_file: str | None, bind_json: str | None,
            event_id: str | None, payload_json: str) -> None:
    """Deliver {"approved": true, ...PAYLOAD} to a wait of RUN. The event is checked
    against the wait's resume contract (event type, bound values, state version,
    expiry, token, schema) and stored whatever the verdict; a rejection exits 1.

    Give the token with --token-file PATH, --token - (stdin) or STEAD_TOKEN: a
    value typed after --token is visible to other users (ps) and in shell history."""
    payload = {"approved": True, **common.parse_json(payload_json, "'--payload'", dict)}
    _decide(ctx, run_id, wait_id, kind, _token(token, token_file), payload, bind_json,
            event_id)


@click.command(short_help="Decline a waiting run: deliver a rejection event.")
@common.run_argument
@_decision_options
@click.option("--reason", default="", metavar="TEXT", help="Why, kept in the payload.")
@click.option("--payload", "payload_json", metavar="JSON", default="{}",
              help="More fields for the event's payload (an object).")
@click.pass_context
def reject(ctx: click.Context, run_id: str, wait_id: str | None, kind: str | None,
           token: str | None, token_file: str | None, bind_json: str | None,
           event_id: str | None, reason: str, payload_json: str) -> None:
    """Deliver {"approved": false, "reason": REASON, ...PAYLOAD} to a wait of RUN; the
    workflow decides what a refusal means. The token is given as for `approve`
    (--token-file PATH, --token - or STEAD_TOKEN keep it out of ps and history)."""
    payload = {"approved": False, "reason": reason,
               **common.parse_json(payload_json, "'--payload'", dict)}
    _decide(ctx, run_id, wait_id, kind, _token(token, token_file), payload, bind_json,
            event_id)


@click.group()
def events() -> None:
    """Events delivered to runs, with their verdicts."""


def _event_line(e: EventRow) -> str:
    verdict = e.verdict if e.reason is None else f"{e.verdict}: {e.reason.replace('_', ' ')}"
    detail = f" ({e.detail})" if e.detail else ""
    # An operator's delivery (dashboard, signed webhook) is not the token holder's.
    by = f"  by operator {e.delivered_by}: {e.delivered_why}" if e.delivered_by else ""
    return common.safe(f"{_when(e.received_at)}  {e.event_id:<24}  {verdict}{detail}  "
                       f"wait={e.wait_id or '-'} payload={e.payload[:60]}{by}")


@events.command("ls")
@common.run_argument
@common.json_option
@click.pass_context
def events_ls(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """Every event delivered to RUN, accepted or not (of the rejected ones,
    the newest: how many more there were is said last), oldest first."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> tuple[list[EventRow], int]:
        async with common.opened_client(db) as client:
            await client.get(run_id)
            return await client.events(run_id), await client.store.rejected_dropped(run_id)

    rows, dropped = common.run_async(go())
    if as_json:
        click.echo(json.dumps([{**dataclasses.asdict(e), "payload": json.loads(e.payload),
                                "bind": json.loads(e.bind)} for e in rows], indent=2)
                   if rows else "[]")
        return
    if not rows:
        click.echo(f"no events delivered to run {common.safe(run_id)}")
    for e in rows:
        click.echo(_event_line(e))
    if dropped:
        click.echo(f"{dropped} older rejected event(s) not kept: only the newest rejected "
                   "events of a run are")


@click.group("waits")
def waits_group() -> None:
    """Durable waits: what runs are waiting for."""


def _wait_line(w: WaitRow) -> str:
    locked = (f"  LOCKED after {w.bad_tokens} bad tokens (stead waits unlock {w.wait_id})"
              if w.locked_at is not None and w.state == WaitState.OPEN else "")
    return common.safe(f"{w.wait_id}  run={w.run_id}  kind={w.kind}  state={w.state}  "
                       f"expires={_when(w.expires_at)}  bind={w.bind}{locked}")


@waits_group.command("ls")
@click.option("--run", "run_id", metavar="RUN", help="Only this run's waits.")
@click.option("--all", "show_all", is_flag=True, help="Closed waits too (consumed, expired, "
                                                      "revoked).")
@click.option("--limit", default=100, show_default=True, type=common.COUNT,
              help="At most this many.")
@common.json_option
@click.pass_context
def waits_ls(ctx: click.Context, run_id: str | None, show_all: bool, limit: int,
             as_json: bool) -> None:
    """Open waits across runs (oldest first), with their expiry and bound values."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> list[WaitRow]:
        async with common.opened_client(db) as client:
            return await client.waits(run_id=run_id, state=None if show_all else WaitState.OPEN,
                                      limit=limit)

    rows = common.run_async(go())
    if as_json:
        click.echo(json.dumps([{**dataclasses.asdict(w), "bind": json.loads(w.bind),
                                "token_hash": None} for w in rows], indent=2))
        return
    if not rows:
        click.echo("no open waits" if not show_all else "no waits")
    for w in rows:
        click.echo(_wait_line(w))



@waits_group.command("unlock")
@click.argument("wait_id", metavar="WAIT")
@click.pass_context
def waits_unlock(ctx: click.Context, wait_id: str) -> None:
    """Unlock WAIT after too many deliveries with a bad token locked it: it
    accepts the right token again, and its count of bad tokens starts over.
    (To end the wait instead, revoke it: the run wakes to stead.WaitRevoked.)"""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> WaitRow:
        async with common.opened_client(db) as client:
            return await client.unlock_wait(wait_id)

    w = common.run_async(go())
    click.echo(f"unlocked wait {common.safe(w.wait_id)} of run {common.safe(w.run_id)}: "
               "deliveries with its token are accepted again")
