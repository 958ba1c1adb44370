"""`stead approve`, `stead reject`, `stead events ls`, `stead waits ls`: the
human side of the resume contract, from the command line."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import urllib.parse
from typing import Any

import click

from stead.cli import common
from stead.records import EventRow, WaitRow, WaitState
from stead.views import runs_view, waits_view
from stead.workflow import waits


def _when(t: float | None) -> str:
    if t is None:
        return "never"
    return runs_view.clock_time(t)


def _event_id(run_id: str, wait: str, token: str | None, payload: Any, bind: Any) -> str:
    """The same decision typed twice is one event: the second is a Duplicate.
    A corrected one (other payload or bound values) is a new event."""
    basis = json.dumps([run_id, wait, token or "", payload, bind], sort_keys=True)
    return "cli-" + hashlib.sha256(basis.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class _Target:
    """What a decision is delivered to: the run, its wait (by id or kind), and
    the token given for it (None: none was)."""

    run_id: str
    wait_id: str | None
    kind: str | None
    token: str | None


def _checked_token(wait: WaitRow | None, token: str | None) -> None:
    """The token given fits the wait: one where it takes one, none where it does not."""
    if wait is None:
        return  # no such wait: the delivery is refused, and stored, as any other
    if wait.token_hash is None and token is not None:
        raise click.ClickException(
            f"wait {wait.wait_id} of run {wait.run_id} takes no token (it was opened without "
            "one: whoever can reach the database answers it); leave out --token, "
            "--token-file and --link (and unset STEAD_TOKEN)")
    if wait.token_hash is not None and token is None:
        raise click.ClickException(
            f"wait {wait.wait_id} takes the token sent to the person deciding: --link - "
            "(the approval link, from stdin), --link-file PATH, --token-file PATH, "
            "--token - (from stdin) or STEAD_TOKEN")


def _decide(ctx: click.Context, target: _Target, payload: dict[str, Any],
            bind_json: str | None, event_id: str | None) -> None:
    run_id, wait_id, kind, token = target.run_id, target.wait_id, target.kind, target.token
    if (wait_id is None) == (kind is None):
        raise click.UsageError("name the wait: --wait ID, or --kind KIND for the run's open "
                               "wait of that kind")
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> tuple[waits.Delivery, dict[str, Any]]:
        async with common.opened_client(db) as client:
            await client.get(run_id)  # no run: say so, and store nothing
            found = [w for w in await client.waits(run_id=run_id, state=None, limit=1000)
                     if w.wait_id == wait_id or (wait_id is None and w.kind == kind
                                                 and w.state == WaitState.OPEN)]
            wait = found[-1] if found else None
            _checked_token(wait, token)
            if bind_json is not None:
                bind = common.parse_json(bind_json, "'--bind'", dict)
            else:  # approve what the wait is bound to, and say so
                bind = json.loads(wait.bind) if wait is not None else {}
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


def _read(path: str, option: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError as exc:
        raise click.BadParameter(f"cannot read it: {exc}", param_hint=option) from exc


def _token(token: str | None, token_file: str | None) -> str | None:
    """The wait's token from --token-file, stdin (--token -), --token or
    STEAD_TOKEN (the first two keep it out of `ps` and shell history); None
    when none is given."""
    if token_file is not None and token is not None and token != os.environ.get("STEAD_TOKEN"):
        raise click.UsageError("give the token once: --token or --token-file")
    if token_file is not None:
        text = _read(token_file, "'--token-file'")
    elif token == "-":
        text = sys.stdin.read().strip()
    else:
        text = (token or "").strip()
    return text or None


def _link(text: str) -> tuple[str, str, str]:
    """The run, wait and token of an approval link as it was handed to the
    approver (`Wait.link`: they are its query's `run`, `wait` and `token`)."""
    fields = urllib.parse.parse_qs(urllib.parse.urlsplit(text.strip()).query,
                                   keep_blank_values=True)
    missing = [n for n in ("run", "wait", "token") if len(fields.get(n, [])) != 1
               or not fields[n][0].strip()]
    if missing:
        raise click.BadParameter(
            f"not an approval link: its query has no single {', '.join(missing)} (a link "
            "made by Wait.link carries run, wait and token)", param_hint="'--link'")
    return fields["run"][0].strip(), fields["wait"][0].strip(), fields["token"][0].strip()


def _target(run_id: str | None, wait_id: str | None, kind: str | None, token: str | None,
            token_file: str | None, link: str | None, link_file: str | None) -> _Target:
    """Where the decision goes, from RUN and --wait/--kind and the token
    options, or from the approval link."""
    if link is not None and link_file is not None:
        raise click.UsageError("give the link once: --link or --link-file")
    if link is None and link_file is None:
        if run_id is None:
            raise click.UsageError("name the run: RUN, or --link with the approval link")
        return _Target(run_id, wait_id, kind, _token(token, token_file))
    text = _read(link_file, "'--link-file'") if link_file is not None else (
        sys.stdin.read() if link == "-" else str(link))
    linked_run, linked_wait, linked_token = _link(text)
    given_token = token_file is not None or (
        token is not None and token != os.environ.get("STEAD_TOKEN"))
    if given_token or kind is not None:
        raise click.UsageError("the link names the wait and carries its token: leave out "
                               "--kind, --token and --token-file")
    for given, linked, what in ((run_id, linked_run, "RUN"), (wait_id, linked_wait, "--wait")):
        if given is not None and given != linked:
            raise click.UsageError(f"{what} is {common.safe(given)}, the link's is "
                                   f"{common.safe(linked)}: give one of them")
    return _Target(linked_run, linked_wait, None, linked_token)


def _decision_options(f: Any) -> Any:
    for option in reversed([
        click.argument("run_id", metavar="[RUN]", required=False),
        click.option("--wait", "wait_id", metavar="ID", help="The wait's id (stead waits ls)."),
        click.option("--kind", metavar="KIND", help="Or: the run's open wait of this kind."),
        click.option("--link", metavar="URL",
                     help="The approval link exactly as it was sent to the person deciding "
                          "(it names the run and the wait, and carries the token). '-' "
                          "reads it from stdin: a link typed here holds the token, visible "
                          "to other users (ps) and kept in shell history."),
        click.option("--link-file", type=click.Path(dir_okay=False, readable=True),
                     metavar="PATH", help="Read the approval link from this file."),
        click.option("--token", metavar="T", envvar="STEAD_TOKEN", show_envvar=True,
                     help="The wait's token, as it was sent to the person deciding (only "
                          "for a wait that takes one). '-' reads it from stdin. A value "
                          "given here is visible to other users (ps) and kept in shell "
                          "history: prefer --token-file, --token - or STEAD_TOKEN."),
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
@_decision_options
@click.option("--payload", "payload_json", metavar="JSON", default="{}",
              help="More fields for the event's payload (an object).")
@click.pass_context
def approve(ctx: click.Context, run_id: str | None, wait_id: str | None, kind: str | None,
            link: str | None, link_file: str | None, token: str | None,
            token_file: str | None, bind_json: str | None, event_id: str | None,
            payload_json: str) -> None:
    """Deliver {"approved": true, ...PAYLOAD} to a wait of RUN. The event is checked
    against the wait's resume contract (event type, bound values, state version,
    expiry, token, schema) and stored whatever the verdict; a rejection exits 1.

    The approval link as it was sent (`--link -`, pasted on stdin) names the run
    and the wait and carries the token. Otherwise name them, and give a wait that
    takes a token its token: --token-file PATH, --token - (stdin) or STEAD_TOKEN
    (a token or link typed on the command line is visible to other users in ps,
    and in shell history). A wait opened without a token takes none: whoever can
    reach the database answers it (`stead waits show WAIT` says which it is)."""
    payload = {"approved": True, **common.parse_json(payload_json, "'--payload'", dict)}
    _decide(ctx, _target(run_id, wait_id, kind, token, token_file, link, link_file), payload,
            bind_json, event_id)


@click.command(short_help="Decline a waiting run: deliver a rejection event.")
@_decision_options
@click.option("--reason", default="", metavar="TEXT", help="Why, kept in the payload.")
@click.option("--payload", "payload_json", metavar="JSON", default="{}",
              help="More fields for the event's payload (an object).")
@click.pass_context
def reject(ctx: click.Context, run_id: str | None, wait_id: str | None, kind: str | None,
           link: str | None, link_file: str | None, token: str | None,
           token_file: str | None, bind_json: str | None, event_id: str | None, reason: str,
           payload_json: str) -> None:
    """Deliver {"approved": false, "reason": REASON, ...PAYLOAD} to a wait of RUN; the
    workflow decides what a refusal means. The wait and its token are given as for
    `approve` (--link -, or RUN --wait ID with --token-file PATH, --token - or
    STEAD_TOKEN where the wait takes a token)."""
    payload = {"approved": False, "reason": reason,
               **common.parse_json(payload_json, "'--payload'", dict)}
    _decide(ctx, _target(run_id, wait_id, kind, token, token_file, link, link_file), payload,
            bind_json, event_id)


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
    asks = f"  asks={waits_view.asks(w)}" if w.request is not None else ""
    token = "yes" if w.token_hash is not None else "no"
    return common.safe(f"{w.wait_id}  run={w.run_id}  kind={w.kind}  state={w.state}  "
                       f"expires={_when(w.expires_at)}  token={token}{asks}  "
                       f"bind={w.bind}{locked}")


def _wait_json(w: WaitRow) -> dict[str, Any]:
    return {**dataclasses.asdict(w), "bind": json.loads(w.bind), "token_hash": None,
            "takes_token": w.token_hash is not None,
            "request": waits_view.shown(w)}


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
        click.echo(json.dumps([_wait_json(w) for w in rows], indent=2))
        return
    if not rows:
        click.echo("no open waits" if not show_all else "no waits")
    for w in rows:
        click.echo(_wait_line(w))


@waits_group.command("show")
@click.argument("wait_id", metavar="WAIT")
@common.json_option
@click.pass_context
def waits_show(ctx: click.Context, wait_id: str, as_json: bool) -> None:
    """What WAIT asks (the request it was opened with, whole), what it is bound
    to, whether it takes a token, and the commands that answer it."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> WaitRow | None:
        async with common.opened_client(db) as client:
            return await client.wait(wait_id)

    w = common.run_async(go())
    if w is None:
        raise click.ClickException(f"no wait {common.safe(wait_id)} (stead waits ls lists "
                                   "them)")
    if as_json:
        click.echo(json.dumps(_wait_json(w), indent=2))
        return
    token = ("yes: the one sent to the person deciding (in the approval link)"
             if w.token_hash is not None else
             "none: it was opened without one, whoever can reach the database answers it")
    lines = [f"wait      {w.wait_id}", f"run       {w.run_id}", f"kind      {w.kind}",
             f"state     {w.state}", f"opened    {_when(w.created_at)}",
             f"expires   {_when(w.expires_at)}", f"token     {token}", f"bind      {w.bind}"]
    if w.request is not None:
        lines += ["asks", *("  " + line for line in waits_view.asks_in_full(w).splitlines())]
    if w.state == WaitState.OPEN:
        lines += ["answer    " + waits_view.answer_command(w),
                  f"          stead reject {w.run_id} --wait {w.wait_id} --reason TEXT"]
    click.echo("\n".join(common.safe_lines(line) for line in lines))



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
