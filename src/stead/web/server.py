"""The dashboard's Starlette app: pages, the operator's actions, the webhook.

Pages are rendered on the server (Jinja2, autoescaped, every value through
`display.neutral`); live parts poll a fragment with htmx (vendored in
`static/`, no CDN), the needs-a-human queue row by row (`static/queue.js`,
`web.queue`) so that no form being filled in is redrawn. Actions go through
`web.actions` (confirmation, the way back, bulk) to `operator.act`, with the
operator's roles. Every request first passes `web.edge` (its Host, its
body's size); reading a page needs a logged-in operator unless the dashboard
is `public`. The store is opened in the app's lifespan (or handed in), and
every read and write goes through `Client` and `stead.operator`, as any other
face of stead does.

An operator of one tenant (`Identity.tenant`) sees and acts on that tenant's
runs alone: each request's `Client` is made once, by `Dashboard.client_for`,
scoped to the operator's tenant (`Client(tenant=...)`, `stead.tenant_scope`),
and every page, action, search, bulk action, stream and audit entry reads
through it, so another tenant's runs are not there (404, left out of lists).
A page that spans every tenant (the fleet's status) is an unscoped
operator's alone (403).
"""

from __future__ import annotations

import contextlib
import secrets
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from stead import bounds, display, errors, operator, records, roles, run_ids, searches
from stead.app import App
from stead.client import Client
from stead.store import Store, open_store
from stead.views import timeline

if TYPE_CHECKING:
    from stead.metrics.exposition import Exposition
from stead.web import (
    actions,
    edge,
    hooks,
    listing,
    live,
    queue,
    security,
    signatures,
    streams,
    throttle,
    views,
    window,
)

HERE = Path(__file__).parent
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # "no-referrer" makes browsers send Origin: null
    "Cache-Control": "no-store",
}
# The largest body of a route that is not the webhook's or an action's: a
# login, a logout, a page (which reads none).
SMALL_BODY = 16 * 1024
Page = Callable[[Request], Awaitable[Response]]


def _shown(value: Any) -> Any:
    """Every value a template renders, with invisible characters named."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return display.neutral(value)
    return value


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             finalize=_shown)
    env.filters.update(named=views.named, clip=views.clip, clip_json=views.clip_json,
                       when=views.when, pretty=views.pretty, pretty_json=views.pretty_json,
                       replay_words=timeline.replay_words, state_version=timeline.state_version,
                       short_id=run_ids.short)
    env.globals.update(left=views.left, age=views.age, label=queue.label, tabs=views.TABS,
                       paged=views.PAGED, left_out=queue.LEFT_OUT, bound_shown=queue.BOUND_SHOWN,
                       statuses=list(records.RunStatus))
    env.tests["allowed_to"] = lambda action, held: roles.allows(held, action.role)
    return env


class Dashboard:
    def __init__(self, app: App | None, db_url: str | None, store: Store | None, *,
                 token: str | None, auth: security.AuthHook | None, read_only: bool,
                 public: bool, poll_seconds: float, signature_tolerance: float,
                 proxies: frozenset[str], stream_seconds: float = streams.MAX_SECONDS) -> None:
        self.app = app
        self.db_url = db_url
        self._given = store
        self.store: Store | None = store
        self.exposition: Exposition | None = None  # made at the first /metrics
        self.guard = security.Guard(token, auth)
        self.read_only = read_only
        self.public = public
        self.poll = poll_seconds
        self.stream_seconds = stream_seconds
        self.env = _templates()
        self.proxies = proxies
        self.logins = throttle.Throttle(*throttle.LOGIN)
        self.webhook = hooks.Webhook(signatures.Verifier(signature_tolerance),
                                     throttle.Throttle(*throttle.WEBHOOK), self.source)

    def source(self, request: Request) -> str:
        """The client a request counts for in the throttles (`throttle.source`)."""
        return throttle.source(request, self.proxies)

    @property
    def everyone(self) -> Client:
        """A client that sees every run: for what no operator asks (the
        webhook, authenticated by a wait's token; a stream token's read)."""
        return self.client_for(None)

    def client_for(self, ident: security.Identity | None) -> Client:
        """The client a request of `ident` reads and acts through: scoped to
        their tenant, if they have one. The one place the dashboard decides
        whose runs a request may see."""
        assert self.store is not None, "the dashboard's store is opened in its lifespan"
        return Client(self.store, self.app, tenant=None if ident is None else ident.tenant)

    @staticmethod
    def client(request: Request) -> Client:
        """The client `readable` (or `_acting`) made for this request."""
        made = getattr(request.state, "client", None)
        assert isinstance(made, Client), "a page reads through readable(); an action _acting()"
        return made

    @contextlib.asynccontextmanager
    async def lifespan(self, _: Starlette) -> AsyncIterator[None]:
        if self._given is None:
            self.store = await open_store(self.db_url)
        try:
            yield
        finally:
            if self.exposition is not None:
                self.exposition.close()
                self.exposition = None
            if self._given is None and self.store is not None:
                await self.store.close()
                self.store = None

    async def metrics(self, _request: Request) -> Response:
        """The store's gauges (and this process's counters) as Prometheus text.
        Open to any client the edge lets in, as a scrape carries no login:
        counts and workflow names only, never a run id or a payload."""
        from stead.client.listing import STRANDED_AFTER
        from stead.metrics.exposition import CONTENT_TYPE, Exposition

        if self.exposition is None:
            try:
                self.exposition = Exposition()
            except ImportError as exc:  # the metrics extra is not installed: it says which
                return Response(f"{exc}\n", 501, media_type="text/plain")
        assert self.store is not None
        await self.exposition.fleet.refresh(self.store, grace=STRANDED_AFTER)
        return Response(self.exposition.render(), media_type=CONTENT_TYPE)

    # -- rendering -----------------------------------------------------------------
    async def html(self, request: Request, name: str, **context: Any) -> str:
        ident = await self.guard.identity(request)
        held = frozenset() if ident is None else ident.roles
        return self.env.get_template(name).render(
            request=request, who=None if ident is None else ident.name, held=held,
            may=lambda action: roles.allows(held, action.role), read_only=self.read_only,
            can_act=ident is not None and not self.read_only, here=_here(request),
            can_log_in=self.guard.can_log_in, csrf=self.guard.csrf_token(request),
            poll=self.poll, **context)

    async def render(self, request: Request, name: str, status: int = 200,
                     **context: Any) -> HTMLResponse:
        html = await self.html(request, name, **context)
        response = HTMLResponse(html, status_code=status, headers=_HEADERS)
        self.guard.issue(request, response)
        return response

    # -- pages -----------------------------------------------------------------------
    def readable(self, page: Page) -> Page:
        """`page`, shown only to a logged-in operator unless the dashboard is
        public; anyone else gets the login page (401)."""
        async def guarded(request: Request) -> Response:
            ident = await self.guard.identity(request)
            if self.public or ident is not None:
                request.state.client = self.client_for(ident)
                return await page(request)
            return await self.render(request, "login.html", 401, failed=False, closed=True)

        return guarded

    async def _bad_query(self, request: Request, exc: errors.InvalidInput) -> Response:
        return await self.render(request, "message.html", 400, title="Not a query this page takes",
                                 message=str(exc), ok=False, run_id=None)

    async def runs(self, request: Request) -> Response:
        try:
            q = listing.parse(request.query_params)
        except errors.InvalidInput as exc:
            return await self._bad_query(request, exc)
        fragment = request.query_params.get("fragment") == "1"
        found = await self.client(request).search_runs(
            status=q.status, workflow=q.workflow, version=q.version, task_id=q.task_id,
            queue=q.queue, tenant=q.tenant, since=q.since, until=q.until, text=q.text,
            after=q.after, limit=q.limit + 1)
        runs, more = found[:q.limit], len(found) > q.limit
        after = searches.Cursor(runs[-1].created_at, runs[-1].run_id) if more else None
        shown = await self.html(request, "_runs.html", runs=runs, q=q,
                                counts=await self.client(request).count_runs(),
                                next=None if after is None else q.link(after))
        if fragment and live.unchanged(request.query_params, shown):
            return Response(status_code=204, headers=_HEADERS)
        return await self.render(request, "_runs_live.html" if fragment else "runs.html",
                                 q=q, shown=Markup(shown), seen=live.digest(shown))

    async def attention(self, request: Request) -> Response:
        fragment = request.query_params.get("fragment") == "1"
        f = queue.Filter.read(request.query_params)
        now = self.client(request).store.clock.now()
        return await self.render(request, "_attention.html" if fragment else "attention.html",
                                 q=await queue.read(self.client(request), f, now), f=f, now=now,
                                 kinds=list(operator.AttentionKind), ages=queue.AGES,
                                 bulk=[operator.ACTIONS[n] for n in actions.BULK],
                                 nonce=secrets.token_urlsafe(12))

    async def status(self, request: Request) -> Response:
        """Is the fleet healthy? What `stead status` prints (`metrics.health`)."""
        from stead.client.listing import STRANDED_AFTER
        from stead.metrics import health

        if self.client(request).tenant is not None:
            return await self.render(request, "message.html", 403, title="Not allowed",
                                     message="The fleet's status spans every tenant: it is "
                                     "shown to operators who are not scoped to one.",
                                     ok=False, run_id=None)
        assert self.store is not None
        found = await health.look(self.store, grace=STRANDED_AFTER, max_age=300.0)
        return await self.render(request, "status.html", s=found)

    async def _page(self, request: Request, make: Callable[[window.Window], Awaitable[Any]]
                    ) -> Any:
        """The page `make` builds for the window the URL asks for, or the
        answer to a query it cannot take (400) or a run there is not (404)."""
        run_id = request.path_params["run_id"]
        try:
            return await make(window.parse(request.query_params))
        except errors.InvalidInput as exc:
            return await self._bad_query(request, exc)
        except errors.UnknownRun:
            return await self.render(request, "message.html", 404, title="No such run",
                                     message=f"There is no run {run_id}.", ok=False,
                                     run_id=None)

    async def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        page = await self._page(request, lambda w: views.run_page(
            self.client(request), run_id, w, views.tab_of(request.query_params)))
        if isinstance(page, Response):
            return page
        drawn = request.query_params.get("drawn", "")[:80]
        moved = bool(drawn) and drawn != f"{page.run.status}@{page.run.epoch}"
        shown = await self.html(request, "_run.html", p=page, moved=moved)
        if request.query_params.get("fragment") != "1":
            return await self.render(request, "run.html", p=page, shown=Markup(shown),
                                     seen=live.digest(shown), nonce=secrets.token_urlsafe(12))
        if live.unchanged(request.query_params, shown):
            return Response(status_code=204, headers=_HEADERS)
        return await self.render(request, "_live.html", p=page, shown=Markup(shown),
                                 seen=live.digest(shown), drawn=drawn)

    async def trace(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        client = self.client(request)
        page = await self._page(request, lambda w: views.trace_page(client, run_id, w))
        if isinstance(page, Response):
            return page
        return await self.render(request, "trace.html", t=page)

    async def stream(self, request: Request) -> Response:
        """A run's stream as SSE: to the holder of a stream token for it,
        without a login; otherwise as any page is read."""
        token = streams.token_of(request)
        if token is not None:
            return await streams.sse(self.everyone, request, token, self.stream_seconds)
        return await self.readable(
            lambda r: streams.sse(self.client(r), r, seconds=self.stream_seconds))(request)

    # -- login -----------------------------------------------------------------------
    async def _cross_site(self, request: Request, form: Any) -> Response | None:
        """A 403 page if this form is cross-site (see `Guard.cross_site`)."""
        refused = self.guard.cross_site(request, str(form.get(security.CSRF_FIELD, "")))
        if refused is None:
            return None
        return await self.render(request, "message.html", 403, title="Refused",
                                 message=refused, ok=False, run_id=None)

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            return await self.render(request, "login.html", failed=False, closed=False)
        form = await request.form()
        refused = await self._cross_site(request, form)
        if refused is not None:
            return refused
        response = RedirectResponse("/attention", status_code=303, headers=_HEADERS)
        # The right token always logs in: failures from the same address (behind
        # a proxy that names no client, everyone's) must not lock operators out.
        # The throttle answers only wrong tokens.
        if self.guard.log_in(str(form.get("token", "")), str(form.get("who", "")),
                             response, secure=request.url.scheme == "https"):
            return response
        source = self.source(request)
        wait = self.logins.refused_for(source)
        if wait > 0:
            slowed = await self.render(
                request, "message.html", 429, title="Too many attempts",
                message=f"Too many wrong tokens from this address: a wrong one is refused "
                        f"for {wait:.0f} s more (the right token still logs in).",
                ok=False, run_id=None)
            slowed.headers["Retry-After"] = str(int(wait) + 1)
            return slowed
        self.logins.failed(source)
        return await self.render(request, "login.html", 401, failed=True, closed=False)

    async def logout(self, request: Request) -> Response:
        refused = await self._cross_site(request, await request.form())
        if refused is not None:
            return refused
        response = RedirectResponse("/", status_code=303, headers=_HEADERS)
        self.guard.log_out(request, response)
        return response

    # -- actions -----------------------------------------------------------------------
    async def _acting(self, request: Request) -> tuple[dict[str, str], security.Identity
                                                       | Response]:
        """The form's values, and who sends it (or the refusal: read-only,
        cross-site, nobody logged in)."""
        form = await request.form()
        values = {k: str(v) for k, v in form.items() if isinstance(v, str)}
        values["pick"] = "\n".join(str(v) for v in form.getlist("pick"))
        back = actions.safe_next(values.get("next"))
        if self.read_only:
            return values, await self.refuse(request, 403, "Read-only", "This dashboard is "
                                             "read-only (--read-only): it takes no action.", back)
        refused = self.guard.cross_site(request, values.get(security.CSRF_FIELD, ""))
        if refused:
            return values, await self.refuse(request, 403, "Refused", refused, back)
        ident = await self.guard.identity(request)
        if ident is None:
            return values, await self.refuse(request, 401, "Log in first",
                                             "Actions need an operator: log in.", back)
        request.state.client = self.client_for(ident)
        return values, ident

    async def refuse(self, request: Request, status: int, title: str, message: str,
                     back: str, run_id: str | None = None) -> Response:
        return await self.render(request, "message.html", status, title=title, message=message,
                                 ok=False, run_id=run_id, back=back)

    async def act(self, request: Request) -> Response:
        run_id, name = request.path_params["run_id"], request.path_params["action"]
        values, ident = await self._acting(request)
        back = actions.safe_next(values.get("next"))
        if isinstance(ident, Response):
            return ident

        async def refuse(status: int, title: str, message: str) -> Response:
            return await self.refuse(request, status, title, message, back, run_id)

        epoch = values.get("expect_epoch", "")
        # str.isdigit() also admits '¹' and other digits int() refuses; 18 digits fit an epoch.
        if epoch and not (epoch.isascii() and epoch.isdigit() and len(epoch) <= 18):
            return await refuse(400, "Refused", "expect_epoch must be a whole number.")
        action = operator.ACTIONS.get(name)
        if action is not None and not actions.confirmed(action, values):
            return await refuse(400, "Not confirmed", actions.unconfirmed(action))
        decision = operator.Decision(run_id=run_id, target=values.get("target", ""),
                                     values=values, by=ident.name, why=values.get("why", ""))
        try:
            done = await operator.act(
                self.client(request), name, decision,
                expect_status=values.get("expect_status") or None,
                expect_epoch=int(epoch) if epoch else None, roles=ident.roles)
        except errors.UnknownRun:
            return await refuse(404, "No such run", f"There is no run {run_id}.")
        except errors.NotAllowed as exc:
            return await refuse(403, "Not allowed", str(exc))
        except (errors.RunMovedOn, errors.NotStopped, errors.UnknownAction,
                errors.WaitNotOpen) as exc:
            return await refuse(409, "Refused: the run moved on", str(exc))
        except errors.SteadError as exc:
            return await refuse(400, "Refused", str(exc))
        return await self.render(request, "message.html", title="Done", message=done.message,
                                 ok=True, run_id=run_id, back=back)

    async def act_on_many(self, request: Request) -> Response:
        values, ident = await self._acting(request)
        back = actions.safe_next(values.get("next"))
        if isinstance(ident, Response):
            return ident
        name = values.get("action", "")
        action = operator.ACTIONS.get(name) if name in actions.BULK else None
        if action is None:
            return await self.refuse(request, 400, "Refused", "Pick one of the actions "
                                     f"{', '.join(actions.BULK)}.", back)
        if not actions.confirmed(action, values):
            return await self.refuse(request, 400, "Not confirmed",
                                     actions.unconfirmed(action), back)
        picks = [p for p in map(actions.Pick.read, values["pick"].splitlines()) if p]
        if not picks or not values.get("why", "").strip():
            return await self.refuse(request, 400, "Refused", "Pick the runs on the queue "
                                     "(their boxes) and say why, then send it again.", back)
        done = await actions.bulk(self.client(request), name, picks, values, ident.name,
                                  ident.roles)
        return await self.render(request, "bulk.html", action=action, done=done, back=back)

    async def hook(self, request: Request) -> Response:
        return await self.webhook.deliver(request, self.everyone,
                                          request.path_params.get("run_id"),
                                          request.path_params.get("task_id"))

    async def unavailable(self, request: Request, exc: Exception) -> Response:
        if request.url.path.startswith("/hooks/"):
            return JSONResponse({"error": f"the store is unavailable: {exc}"}, 503)
        return await self.render(request, "message.html", 503, title="Store unavailable",
                                 message=str(exc), ok=False, run_id=None)


def _here(request: Request) -> str:
    """The page this request draws (its live fragment's: the page itself),
    for a form's `next`."""
    kept = [(k, v) for k, v in request.query_params.multi_items()
            if v and k not in ("fragment", "drawn")]
    query = urllib.parse.urlencode(kept)
    return request.url.path + (f"?{query}" if query else "")


def create_app(
    app: App | None = None, *, db_url: str | None = None, store: Store | None = None,
    token: str | None = None, auth: security.AuthHook | None = None,
    read_only: bool = False, public: bool = False, hosts: Sequence[str] = (),
    poll_seconds: float = 2.0, max_body: int = hooks.MAX_BODY,
    signature_tolerance: float = signatures.TOLERANCE, trusted_proxies: Sequence[str] = (),
    stream_seconds: float = streams.MAX_SECONDS,
) -> Starlette:
    """The dashboard and webhook as an ASGI app, over the store at `db_url`
    (opened in its lifespan) or the `store` given. Reading and acting need
    `token` (what an operator types to log in: `STEAD_UI_TOKEN`) or an `auth`
    hook that names the operator of a request; `public` shows the pages to
    anyone, `read_only` takes no action at all. Requests are answered for the
    loopback names and `hosts` only; bodies are at most `max_body` bytes (the
    webhook's and the actions'), 16 KB elsewhere; a webhook signature is good
    for `signature_tolerance` seconds around its time. Failed logins and
    webhook calls are throttled per client: the peer's address, or, from one
    of the `trusted_proxies` addresses, the client its `X-Forwarded-For`
    names (see `web.throttle`). A stream's SSE response lasts `stream_seconds`
    at most, then the browser reconnects from where it was."""
    bounds.seconds(stream_seconds, "stream_seconds")
    d = Dashboard(app, db_url, store, token=token, auth=auth, read_only=read_only,
                  public=public, poll_seconds=poll_seconds,
                  signature_tolerance=signature_tolerance, proxies=frozenset(trusted_proxies),
                  stream_seconds=stream_seconds)

    def limit(path: str) -> int:
        return max_body if path.startswith("/hooks/") or "/actions/" in path else SMALL_BODY

    routes = [
        Route("/", d.readable(d.runs)),
        Route("/runs", d.readable(d.runs)),
        Route("/attention", d.readable(d.attention)),
        Route("/runs/{run_id}", d.readable(d.run)),
        Route("/runs/{run_id}/trace", d.readable(d.trace)),
        Route("/runs/{run_id}/streams/{name}", d.stream),
        Route("/runs/{run_id}/actions/{action}", d.act, methods=["POST"]),
        Route("/attention/actions/bulk", d.act_on_many, methods=["POST"]),
        Route("/status", d.readable(d.status)),
        Route("/metrics", d.metrics),
        Route("/login", d.login, methods=["GET", "POST"]),
        Route("/logout", d.logout, methods=["POST"]),
        Route("/hooks/runs/{run_id}/events", d.hook, methods=["POST"]),
        Route("/hooks/tasks/{task_id}/events", d.hook, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes, lifespan=d.lifespan,
                     middleware=[Middleware(edge.Edge, hosts=(*edge.LOOPBACK, *hosts),
                                            limit=limit, proxies=trusted_proxies)],
                     exception_handlers={errors.StoreError: d.unavailable})
