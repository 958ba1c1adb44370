"""`stead ui MODULE:APP`: the operator's dashboard and the event webhook
(`pip install -e '.[web]'`), served with uvicorn."""

from __future__ import annotations

import importlib
import os
from typing import Any

import click

from stead import errors, roles, tenants
from stead.cli import common

TOKEN_ENV = "STEAD_UI_TOKEN"


def _auth_hook(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        hook = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise click.BadParameter(f"cannot load {spec!r}: {exc}", param_hint="'--auth'") from exc
    if not callable(hook):
        raise click.BadParameter(f"{spec!r} is not callable", param_hint="'--auth'")
    return hook


def _groups(specs: tuple[str, ...]) -> dict[str, roles.Given]:
    found: dict[str, roles.Given] = {}
    for spec in specs:
        group, _, role = spec.rpartition("=")
        try:
            held = roles.held_in(role)
            tenants.check(held[1], "a proxy group's tenant")
        except (ValueError, errors.InvalidTenant):
            held = None
        if not group.strip() or held is None:
            raise click.BadParameter(
                f"{spec[:80]!r}: give GROUP=ROLE or GROUP=ROLE@TENANT, ROLE one of "
                f"{', '.join(roles.Role)}", param_hint="'--proxy-group'")
        found[group.strip()] = held
    return found


@click.command(short_help="Serve the operator's dashboard and the event webhook.")
@common.app_argument
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (the default is this machine only).")
@click.option("--port", type=click.IntRange(0, 65535), default=8484, show_default=True,
              help="Port to listen on.")
@click.option("--read-only", is_flag=True, help="Take no action (pages still need a login "
              "unless --public).")
@click.option("--public", is_flag=True,
              help="Show the pages to anyone who can reach them, without a login "
                   "(actions still need one).")
@click.option("--allow-host", "allowed", metavar="NAME", multiple=True,
              help="A name besides the loopback ones (and --host) that browsers and "
                   "webhook senders reach this server by; repeat for more. Other Host "
                   "headers are refused (421).")
@click.option("--signature-tolerance", type=click.FloatRange(min=1, max=86400),
              default=300.0, show_default=True,
              help="Seconds a webhook's Stead-Signature is good for around its time.")
@click.option("--auth", "auth_spec", metavar="MODULE:FUNCTION", default=None,
              help="A function(request) returning the operator's name (or None): "
                   "your proxy's or SSO's login instead of the token.")
@click.option("--trusted-proxy", "proxies", metavar="ADDRESS", multiple=True,
              help="The address of an SSO proxy whose X-Forwarded-User and "
                   "X-Forwarded-Groups headers name the operator, and whose "
                   "X-Forwarded-For and X-Forwarded-Proto name the client and the "
                   "scheme (failed logins count per client); repeat for more. "
                   "Requests from other addresses are not believed.")
@click.option("--proxy-group", "proxy_groups", metavar="GROUP=ROLE[@TENANT]", multiple=True,
              help="The role (viewer, approver, operator, admin) a proxy group gives, "
                   "in one tenant with @TENANT (its operators see that tenant's runs "
                   "alone); repeat for more. An operator in no such group is a viewer, "
                   "unless a group names a tenant: then they are not let in.")
@click.option("--poll", type=common.Seconds(least=0.2), default=2.0, show_default=True,
              help="Seconds between live updates of a page.")
@click.pass_context
def ui(ctx: click.Context, app_spec: str, host: str, port: int, read_only: bool,
       public: bool, allowed: tuple[str, ...], signature_tolerance: float,
       auth_spec: str | None, proxies: tuple[str, ...], proxy_groups: tuple[str, ...],
       poll: float) -> None:
    """Serve the dashboard for MODULE:APP: runs, what needs a human, each run's
    timeline, and the actions that decide (each recorded with who and why).

    Reading and acting need a login: the token in STEAD_UI_TOKEN (16
    characters or more) or an --auth hook; --public shows the pages to anyone.
    Requests must name this server by a loopback name, the --host address or
    an --allow-host name. POST /hooks/runs/RUN/events (or
    /hooks/tasks/TASK/events) delivers an event over HTTP with the wait's token
    or a Stead-Signature."""
    try:
        import uvicorn

        from stead.web import create_app, sso_proxy
    except ImportError as exc:
        raise click.ClickException(
            f"the dashboard needs stead's web extra: pip install -e '.[web]' in stead's "
            f"checkout (docs/install.md) ({exc})") from exc
    app = common.load_app(app_spec)
    db = common.database_url(ctx)
    common.require_database(db)
    token = os.environ.get(TOKEN_ENV) or None
    if token is not None and len(token) < 16:
        raise click.ClickException(f"{TOKEN_ENV} is too short: use 16 characters or more")
    auth = None if auth_spec is None else _auth_hook(auth_spec)
    if proxies:
        if auth is not None:
            raise click.UsageError("give --auth or --trusted-proxy, not both")
        auth = sso_proxy(proxies, _groups(proxy_groups))
    elif proxy_groups:
        raise click.UsageError("--proxy-group needs --trusted-proxy ADDRESS")
    # The address it listens on is a name it is reached by (but a wildcard,
    # which no browser sends).
    hosts = (*allowed, *([] if host in ("0.0.0.0", "::", "") else [host]))
    web = create_app(app, db_url=db, token=token, auth=auth, read_only=read_only,
                     public=public, hosts=hosts, poll_seconds=poll,
                     signature_tolerance=signature_tolerance, trusted_proxies=proxies)
    if token is None and auth is None and not public:
        click.echo(f"no {TOKEN_ENV}, no --auth and no --public: nobody can log in, so the "
                   "pages show nothing (the webhook works)", err=True)
    mode = ("read-only" if read_only else "actions need a login") + (
        ", pages public" if public else ", pages need a login")
    click.echo(f"stead ui on http://{host}:{port} ({mode})", err=True)
    # With a trusted proxy the dashboard reads its X-Forwarded-* headers itself
    # (`web.edge`, `web.throttle`): uvicorn's reading would replace the peer with
    # the client, and the proxy's headers would then name nobody.
    uvicorn.run(web, host=host, port=port, log_level="warning", proxy_headers=not proxies)
