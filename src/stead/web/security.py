"""Who may act on the dashboard, and from where.

- **Login.** Reading a page (unless the dashboard is public) and acting need
  an operator: a session made by logging in with the token from
  `STEAD_UI_TOKEN` (compared in constant time) and a name, or the name an auth
  hook returns for the request (`create_app(auth=...)`: your reverse proxy's
  header, your SSO; `web.proxy` reads an SSO proxy's headers). Without either,
  nobody can. Failed logins are counted per source address (`web.throttle`).
- **Roles.** An auth hook may return an `Identity` (a name and its roles,
  `stead.roles`) instead of a name; each action needs a role
  (`operator.Action.role`). A name alone, and a token login, hold every role.
- **Tenants.** An `Identity` may name a `tenant`: its roles hold in that
  tenant alone, and every run of another is invisible to it (the
  dashboard reads through `Client(tenant=...)`). An identity without one
  sees every tenant's runs, as before tenants.
- **CSRF.** Every form carries the browser's CSRF token, also kept in a
  `SameSite=Strict`, `HttpOnly` cookie; a POST whose field does not match it
  (compared in constant time), or whose `Origin` is another site, is refused
  with 403 before anything else is read.
- **Sessions** live in the server's memory (a restart logs everyone out) and
  end after `SESSION_SECONDS`.
"""

from __future__ import annotations

import dataclasses
import hmac
import inspect
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from stead.roles import Role

SESSION_COOKIE = "stead_session"
CSRF_COOKIE = "stead_csrf"
CSRF_FIELD = "csrf"
SESSION_SECONDS = 8 * 3600

EVERY_ROLE = frozenset(Role)


@dataclasses.dataclass(frozen=True)
class Identity:
    """Who makes a request: the operator's `name` (recorded with every
    action), the `roles` they hold, and the `tenant` they hold them in (None:
    every tenant)."""

    name: str
    roles: frozenset[Role] = EVERY_ROLE
    tenant: str | None = None


# An auth hook: the operator's name (holding every role) or Identity for this
# request, or None (not logged in).
AuthHook = Callable[[Request], "str | Identity | Awaitable[str | Identity | None] | None"]


def same(given: str, expected: str) -> bool:
    """Constant-time comparison of two secrets."""
    return hmac.compare_digest(given.encode(), expected.encode())


@dataclasses.dataclass
class Session:
    who: str
    expires_at: float


class Guard:
    """The dashboard's login, sessions and CSRF checks."""

    def __init__(self, token: str | None, auth: AuthHook | None) -> None:
        if token is not None and len(token) < 16:
            raise ValueError("STEAD_UI_TOKEN must be at least 16 characters long")
        self.token = token
        self.auth = auth
        self._sessions: dict[str, Session] = {}

    @property
    def can_log_in(self) -> bool:
        return self.token is not None

    # -- who -----------------------------------------------------------------------
    async def operator(self, request: Request) -> str | None:
        """The operator making this request (None: nobody is logged in)."""
        found = await self.identity(request)
        return None if found is None else found.name

    async def identity(self, request: Request) -> Identity | None:
        """Who makes this request, with their roles (None: nobody is logged in)."""
        if self.auth is not None:
            who = self.auth(request)
            if inspect.isawaitable(who):
                who = await who
            if isinstance(who, Identity) and who.name.strip():
                return who
            if who and not isinstance(who, Identity):
                return Identity(str(who))
        sid = request.cookies.get(SESSION_COOKIE, "")
        session = self._sessions.get(sid)
        if session is None:
            return None
        if session.expires_at < time.time():
            del self._sessions[sid]
            return None
        return Identity(session.who)

    def log_in(self, token: str, who: str, response: Response, secure: bool) -> bool:
        """Open a session if `token` is the dashboard's token."""
        if self.token is None or not same(token, self.token) or not who.strip():
            return False
        sid = secrets.token_urlsafe(32)
        self._sessions[sid] = Session(who.strip()[:80], time.time() + SESSION_SECONDS)
        response.set_cookie(SESSION_COOKIE, sid, max_age=SESSION_SECONDS, httponly=True,
                            samesite="strict", secure=secure)
        return True

    def log_out(self, request: Request, response: Response) -> None:
        self._sessions.pop(request.cookies.get(SESSION_COOKIE, ""), None)
        response.delete_cookie(SESSION_COOKIE)

    # -- CSRF ----------------------------------------------------------------------
    @staticmethod
    def csrf_token(request: Request) -> str:
        """The browser's CSRF token (a new one if it has none yet: `issue`
        sets its cookie on the response)."""
        token = request.cookies.get(CSRF_COOKIE) or getattr(request.state, "csrf", None)
        if not token:
            token = secrets.token_urlsafe(32)
            request.state.csrf = token
        return str(token)

    @staticmethod
    def issue(request: Request, response: Response) -> None:
        """Set the CSRF cookie if this request made the token."""
        made = getattr(request.state, "csrf", None)
        if made and not request.cookies.get(CSRF_COOKIE):
            response.set_cookie(CSRF_COOKIE, made, httponly=True, samesite="strict",
                                secure=request.url.scheme == "https")

    @staticmethod
    def cross_site(request: Request, field: str) -> str | None:
        """Why this POST is refused as cross-site (None: it is not)."""
        origin = request.headers.get("origin")
        if origin is not None and origin != "null":
            theirs = urllib.parse.urlsplit(origin)
            if (theirs.scheme, theirs.netloc) != (request.url.scheme, request.url.netloc):
                return f"the form came from another site ({origin})"
        elif origin == "null":
            return "the form came from an opaque origin"
        cookie = request.cookies.get(CSRF_COOKIE, "")
        if not cookie or not field or not same(field, cookie):
            return "the form's CSRF token is missing or wrong: reload the page and try again"
        return None
