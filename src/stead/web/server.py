"""The dashboard's Starlette app: pages, the operator's actions, the webhook.

Pages are rendered on the server (Jinja2, autoescaped, every value through
`display.neutral`); live parts poll a fragment with htmx (vendored in
`static/`, no CDN). Every request first passes `web.edge` (its Host, its
body's size); reading a page needs a logged-in operator unless the dashboard
is `public`. The store is opened in the app's lifespan (or handed in), and
every read and write goes through `Client` and `stead.operator`, as any other
face of stead does.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from stead import display, errors, operator, records
from stead.app import App
from stead.client import Client
from stead.store import Store, open_store
from stead.web import edge, hooks, security, signatures, streams, throttle, views

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
    env.filters.update(clip=views.clip, clip_json=views.clip_json, when=views.when)
    env.globals.update(left=views.left, statuses=list(records.RunStatus))
    return env


class Dashboard:
    def __init__(self, app: App | None, db_url: str | None, store: Store | None, *,
                 token: str | None, auth: security.AuthHook | None, read_only: bool,
                 public: bool, poll_seconds: float, signature_tolerance: float) -> None:
        self.app = app
        self.db_url = db_url
        self._given = store
        self.store: Store | None = store
        self.guard = security.Guard(token, auth)
        self.read_only = read_only
        self.public = public
        self.poll = poll_seconds
        self.env = _templates()
        self.logins = throttle.Throttle(*throttle.LOGIN)
        self.webhook = hooks.Webhook(signatures.Verifier(signature_tolerance),
                                     throttle.Throttle(*throttle.WEBHOOK))

    @property
    def client(self) -> Client:
        assert self.store is not None, "the dashboard's store is opened in its lifespan"
        return Client(self.store, self.app)

    @contextlib.asynccontextmanager
    async def lifespan(self, _: Starlette) -> AsyncIterator[None]:
        if self._given is None:
            self.store = await open_store(self.db_url)
        try:
            yield
        finally:
            if self._given is None and self.store is not None:
                await self.store.close()
                self.store = None

    # -- rendering -----------------------------------------------------------------
    async def render(self, request: Request, name: str, status: int = 200,
                     **context: Any) -> HTMLResponse:
        who = await self.guard.operator(request)
        html = self.env.get_template(name).render(
            request=request, who=who, read_only=self.read_only,
            can_act=who is not None and not self.read_only,
            can_log_in=self.guard.can_log_in, csrf=self.guard.csrf_token(request),
            poll=self.poll, **context)
        response = HTMLResponse(html, status_code=status, headers=_HEADERS)
        self.guard.issue(request, response)
        return response

    # -- pages -----------------------------------------------------------------------
    def readable(self, page: Page) -> Page:
        """`page`, shown only to a logged-in operator unless the dashboard is
        public; anyone else gets the login page (401)."""
        async def guarded(request: Request) -> Response:
            if self.public or await self.guard.operator(request) is not None:
                return await page(request)
            return await self.render(request, "login.html", 401, failed=False, closed=True)

        return guarded

    def _filters(self, request: Request) -> dict[str, Any]:
        q = request.query_params
        code = q.get("workflow", "").strip()
        name, _, version = code.partition("@")
        since = q.get("since", "").strip()
        try:
            start = (dt.datetime.fromisoformat(since).replace(tzinfo=dt.UTC).timestamp()
                     if since else None)
        except ValueError:
            start = None
        status = q.get("status") or None
        return {
            "status": status if status in records.RunStatus.__members__.values() else None,
            "workflow": name or None,
            "version": int(version) if version.isdigit() else None,
            "task_id": q.get("task_id", "").strip() or None,
            "since": start,
        }

    async def runs(self, request: Request) -> Response:
        f = self._filters(request)
        fragment = request.query_params.get("fragment") == "1"
        runs = await self.client.search_runs(**f, limit=200)
        counts = await self.client.count_runs()
        return await self.render(request, "_runs.html" if fragment else "runs.html",
                                 runs=runs, counts=counts, f=f, query=request.url.query)

    async def attention(self, request: Request) -> Response:
        fragment = request.query_params.get("fragment") == "1"
        items = await operator.needs_a_human(self.client)
        return await self.render(request, "_attention.html" if fragment else "attention.html",
                                 items=items, now=self.client.store.clock.now(),
                                 nonce=secrets.token_urlsafe(12))

    async def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        fragment = request.query_params.get("fragment") == "1"
        try:
            page = await views.run_page(self.client, run_id)
        except errors.UnknownRun:
            return await self.render(request, "message.html", 404, title="No such run",
                                     message=f"There is no run {run_id}.", ok=False,
                                     run_id=None)
        drawn = request.query_params.get("drawn", "")
        moved = bool(drawn) and drawn != f"{page.run.status}@{page.run.epoch}"
        return await self.render(request, "_run.html" if fragment else "run.html",
                                 p=page, moved=moved, nonce=secrets.token_urlsafe(12))

    async def stream(self, request: Request) -> Response:
        return await streams.sse(self.client, request)

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
        source = throttle.source(request)
        wait = self.logins.refused_for(source)
        if wait > 0:
            slowed = await self.render(
                request, "message.html", 429, title="Too many attempts",
                message=f"Too many failed logins from this address: try again in {wait:.0f} s.",
                ok=False, run_id=None)
            slowed.headers["Retry-After"] = str(int(wait) + 1)
            return slowed
        form = await request.form()
        refused = await self._cross_site(request, form)
        if refused is not None:
            return refused
        response = RedirectResponse("/attention", status_code=303, headers=_HEADERS)
        if not self.guard.log_in(str(form.get("token", "")), str(form.get("who", "")),
                                 response, secure=request.url.scheme == "https"):
            self.logins.failed(source)
            return await self.render(request, "login.html", 401, failed=True, closed=False)
        return response

    async def logout(self, request: Request) -> Response:
        refused = await self._cross_site(request, await request.form())
        if refused is not None:
            return refused
        response = RedirectResponse("/", status_code=303, headers=_HEADERS)
        self.guard.log_out(request, response)
        return response

    # -- actions -----------------------------------------------------------------------
    async def act(self, request: Request) -> Response:
        run_id, name = request.path_params["run_id"], request.path_params["action"]
        form = await request.form()
        values = {k: str(v) for k, v in form.items() if isinstance(v, str)}

        async def refuse(status: int, title: str, message: str) -> Response:
            return await self.render(request, "message.html", status, title=title,
                                     message=message, ok=False, run_id=run_id)

        if self.read_only:
            return await refuse(403, "Read-only", "This dashboard is read-only "
                                "(--read-only): it takes no action.")
        refused = self.guard.cross_site(request, values.get(security.CSRF_FIELD, ""))
        if refused:
            return await refuse(403, "Refused", refused)
        who = await self.guard.operator(request)
        if who is None:
            return await refuse(401, "Log in first", "Actions need an operator: log in.")
        epoch = values.get("expect_epoch", "")
        # str.isdigit() also admits '¹' and other digits int() refuses; 18 digits fit an epoch.
        if epoch and not (epoch.isascii() and epoch.isdigit() and len(epoch) <= 18):
            return await refuse(400, "Refused", "expect_epoch must be a whole number.")
        decision = operator.Decision(run_id=run_id, target=values.get("target", ""),
                                     values=values, by=who, why=values.get("why", ""))
        try:
            done = await operator.act(
                self.client, name, decision, expect_status=values.get("expect_status") or None,
                expect_epoch=int(epoch) if epoch else None)
        except errors.UnknownRun:
            return await refuse(404, "No such run", f"There is no run {run_id}.")
        except (errors.RunMovedOn, errors.NotStopped, errors.UnknownAction,
                errors.WaitNotOpen) as exc:
            return await refuse(409, "Refused: the run moved on", str(exc))
        except errors.SteadError as exc:
            return await refuse(400, "Refused", str(exc))
        return await self.render(request, "message.html", title="Done",
                                 message=done.message, ok=True, run_id=run_id)

    async def hook(self, request: Request) -> Response:
        return await self.webhook.deliver(request, self.client,
                                          request.path_params.get("run_id"),
                                          request.path_params.get("task_id"))

    async def unavailable(self, request: Request, exc: Exception) -> Response:
        if request.url.path.startswith("/hooks/"):
            return JSONResponse({"error": f"the store is unavailable: {exc}"}, 503)
        return await self.render(request, "message.html", 503, title="Store unavailable",
                                 message=str(exc), ok=False, run_id=None)


def create_app(
    app: App | None = None, *, db_url: str | None = None, store: Store | None = None,
    token: str | None = None, auth: security.AuthHook | None = None,
    read_only: bool = False, public: bool = False, hosts: Sequence[str] = (),
    poll_seconds: float = 2.0, max_body: int = hooks.MAX_BODY,
    signature_tolerance: float = signatures.TOLERANCE,
) -> Starlette:
    """The dashboard and webhook as an ASGI app, over the store at `db_url`
    (opened in its lifespan) or the `store` given. Reading and acting need
    `token` (what an operator types to log in: `STEAD_UI_TOKEN`) or an `auth`
    hook that names the operator of a request; `public` shows the pages to
    anyone, `read_only` takes no action at all. Requests are answered for the
    loopback names and `hosts` only; bodies are at most `max_body` bytes (the
    webhook's and the actions'), 16 KB elsewhere; a webhook signature is good
    for `signature_tolerance` seconds around its time."""
    d = Dashboard(app, db_url, store, token=token, auth=auth, read_only=read_only,
                  public=public, poll_seconds=poll_seconds,
                  signature_tolerance=signature_tolerance)

    def limit(path: str) -> int:
        return max_body if path.startswith("/hooks/") or "/actions/" in path else SMALL_BODY

    routes = [
        Route("/", d.readable(d.runs)),
        Route("/runs", d.readable(d.runs)),
        Route("/attention", d.readable(d.attention)),
        Route("/runs/{run_id}", d.readable(d.run)),
        Route("/runs/{run_id}/streams/{name}", d.readable(d.stream)),
        Route("/runs/{run_id}/actions/{action}", d.act, methods=["POST"]),
        Route("/login", d.login, methods=["GET", "POST"]),
        Route("/logout", d.logout, methods=["POST"]),
        Route("/hooks/runs/{run_id}/events", d.hook, methods=["POST"]),
        Route("/hooks/tasks/{task_id}/events", d.hook, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes, lifespan=d.lifespan,
                     middleware=[Middleware(edge.Edge, hosts=(*edge.LOOPBACK, *hosts),
                                            limit=limit)],
                     exception_handlers={errors.StoreError: d.unavailable})
