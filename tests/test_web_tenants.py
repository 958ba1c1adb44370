"""Operators scoped by tenant, on every route of the dashboard: a property
test drawing a route (enumerated from the app's router, so a route added
later is drawn too), a method, a role, the operator's tenant (or none, or
nobody logged in) and whose run the request names. An operator of tenant A
(viewer, approver, operator or admin of A) never gets anything of B's runs
(not their ids on a list, not their input, waits or streams) and changes
nothing of them (status, epoch, waits, events, audit); an operator of no
tenant sees both, as before tenants. On both stores."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from starlette.requests import Request
from starlette.routing import Route

import stead
from stead import operator
from stead.roles import Role
from stead.web import create_app
from stead.web.actions import BULK, CONFIRM
from stead.web.security import CSRF_COOKIE, Identity
from tests import stress

app = stead.App("tenants-web")
TENANTS = ("a", "b")
CSRF = "c" * 43


@app.workflow(version=1)
async def ask(run: stead.Run, secret: str) -> str:
    answer = run.stream("answer")
    await answer.append(f"thinking about {secret}")
    await answer.close()  # a reader's response ends with it
    decided = await (await run.wait("approval", request={"about": secret}))
    return f"{secret}: {decided}"


@dataclasses.dataclass(frozen=True)
class Tenant:
    run_id: str
    task_id: str
    wait_id: str
    secret: str
    token: str  # an end user's stream token for its run's answer


async def _world(store: stead.Store, n: int = 0) -> dict[str, Tenant]:
    """A run of each tenant waiting for a person (its task the `n`th)."""
    client = stead.Client(store, app)
    started = {t: await client.start(ask, f"{t}-secret-{t * 6}", tenant=t,
                                     task_id=f"task-{t}-{n}") for t in TENANTS}
    await stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01)).run_until_idle()
    world = {}
    for t, info in started.items():
        [wait] = await client.waits(run_id=info.run_id)
        token = await client.stream_token(info.run_id, stream="answer")
        world[t] = Tenant(info.run_id, f"task-{t}-{n}", wait.wait_id, f"{t}-secret-{t * 6}",
                          token.text)
    return world


async def _seen(store: stead.Store, who: Tenant) -> tuple[Any, ...]:
    """What a request could change of a tenant's run."""
    client = stead.Client(store, app)
    run = await store.get_run(who.run_id)
    return (run.status, run.epoch, [(w.wait_id, w.state, w.bad_tokens)
                                    for w in await client.waits(run_id=who.run_id, state=None)],
            len(await client.events(who.run_id)), len(await store.list_actions(who.run_id)))


class Holder:
    """The identity the auth hook names for the request being made."""

    ident: Identity | None = None

    def hook(self, _request: Request) -> Identity | None:
        return self.ident


def _routes(asgi: Any) -> list[tuple[str, str]]:
    """Every (path, method) the app's router serves."""
    return sorted((r.path, m) for r in asgi.routes if isinstance(r, Route)
                  for m in (r.methods or {"GET"}) if m != "HEAD")


def _fill(path: str, target: Tenant, action: str) -> str:
    values = {"run_id": target.run_id, "name": "answer", "action": action,
              "task_id": target.task_id}
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


def test_no_route_shows_or_changes_another_tenants_runs(db_url: str) -> None:
    holder = Holder()
    with asyncio.Runner() as runner:
        store = runner.run(stead.open_store(db_url))
        world = runner.run(_world(store))
        asgi = create_app(app, store=store, auth=holder.hook)
        routes = _routes(asgi)
        made = [1]
        assert ("/runs/{run_id}", "GET") in routes and len(routes) >= 10

        async def request(path: str, method: str, action: str, target: Tenant,
                          query: str) -> httpx.Response:
            url = _fill(path, target, action)
            other = world["b" if target is world["a"] else "a"]
            query = query.replace("TOKEN_OF_OTHER", other.token).replace("TOKEN", target.token)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                         base_url="http://127.0.0.1",
                                         cookies={CSRF_COOKIE: CSRF}) as http:
                if method == "GET":
                    return await http.get(url + query)
                bulk = url.endswith("/bulk")
                return await http.post(url, data={
                    "csrf": CSRF, "why": "drawn by the test", CONFIRM: "yes",
                    "action": action if bulk else "", "decision": "approve",
                    "target": target.wait_id if action in (
                        "approve", "reject", "revoke_wait", "unlock_wait") else "",
                    "pick": f"{target.run_id} waiting 1", "payload": "{}"})

        @settings(max_examples=stress.examples(200), deadline=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(route=st.sampled_from(routes), role=st.sampled_from(list(Role)),
               tenant=st.sampled_from([*TENANTS, None, "nobody"]),
               whose=st.sampled_from(TENANTS),
               action=st.sampled_from([*operator.ACTIONS, *BULK]),
               query=st.sampled_from(["", "?text=secret", "?fragment=1", "?status=waiting",
                                      "?tab=waits", "?after=0", "?token=TOKEN",
                                      "?token=TOKEN_OF_OTHER"]))
        def check(route: tuple[str, str], role: Role, tenant: str | None, whose: str,
                  action: str, query: str) -> None:
            path, method = route
            if any(runner.run(store.get_run(w.run_id)).status != "waiting"
                   for w in world.values()):  # an earlier example decided them: afresh
                world.update(runner.run(_world(store, len(made))))
                made.append(1)
            holder.ident = (None if tenant == "nobody"
                            else Identity("drawn", frozenset({role}), tenant))
            target = world[whose]
            others = [world[t] for t in TENANTS if tenant not in (None, "nobody") and t != tenant]
            before = [runner.run(_seen(store, o)) for o in others]
            r = runner.run(request(path, method, action, target, query))
            assert r.status_code < 500, (route, r.status_code, r.text[:300])
            if "token=" in query:
                # A stream token opens its own run's stream, for anyone, and
                # nothing else: another run's stream is 403, another route
                # answers as it would without it.
                opens = path.endswith("/streams/{name}") and method == "GET"
                if opens:
                    assert r.status_code == (200 if query == "?token=TOKEN" else 403)
                    if query == "?token=TOKEN":
                        return
                elif tenant == "nobody":
                    assert target.secret not in r.text and target.wait_id not in r.text
                    assert r.status_code != 200 or path in ("/login", "/metrics"), route
            for other, was in zip(others, before, strict=True):
                body = r.text
                # Nothing of another tenant's run: its input, its wait, its id
                # (unless the request's own URL named it).
                assert other.secret not in body, (route, role, tenant, whose)
                assert other.wait_id not in body, (route, role, tenant, whose)
                if other is not target:
                    assert other.run_id not in body, (route, role, tenant, whose)
                else:
                    assert r.status_code != 200 or "/streams/" not in path
                assert runner.run(_seen(store, other)) == was, (route, role, tenant, whose)
            if method == "GET" and path == "/runs/{run_id}" and tenant != "nobody" \
                    and not query:
                sees = tenant is None or tenant == whose
                event(f"run page seen: {sees}")
                assert (r.status_code == 200 and target.secret in r.text) == sees

        check()
        # And each identity's own view, drawn in full: its tenant's run (or
        # both, with no tenant) on the run page, the runs list and the queue.
        world.update(runner.run(_world(store, len(made))))
        for role in Role:
            for tenant in (*TENANTS, None):
                holder.ident = Identity("drawn", frozenset({role}), tenant)
                for whose, target in world.items():
                    sees = tenant is None or tenant == whose
                    page = runner.run(request("/runs/{run_id}", "GET", "", target, ""))
                    assert (page.status_code == 200 and target.secret in page.text) == sees
                    assert page.status_code == (200 if sees else 404)
                    for listed in ("/runs", "/attention"):
                        found = runner.run(request(listed, "GET", "", target, ""))
                        assert found.status_code == 200
                        assert (target.run_id in found.text) == sees, (listed, tenant, whose)
        runner.run(store.close())


def _proxied(groups: str) -> Request:
    return Request({"type": "http", "client": ("10.0.0.5", 1), "headers": [
        (b"x-forwarded-user", b"kim"), (b"x-forwarded-groups", groups.encode())]})


def test_sso_groups_give_roles_in_one_tenant() -> None:
    from stead.web.proxy import sso_proxy

    hook = sso_proxy(["10.0.0.5"], {"acme-ops": "operator@acme", "acme-view": "viewer@acme",
                                    "globex-ops": ("operator", "globex"), "admins": "admin",
                                    "readers": "viewer"})
    assert hook(_proxied("acme-ops")) == Identity("kim", frozenset({Role.OPERATOR}), "acme")
    both = hook(_proxied("acme-ops, acme-view"))
    assert both == Identity("kim", frozenset({Role.OPERATOR, Role.VIEWER}), "acme")
    # An unscoped role beside a scoped one holds in that tenant alone.
    assert hook(_proxied("readers,acme-ops")) == Identity(
        "kim", frozenset({Role.VIEWER, Role.OPERATOR}), "acme")
    assert hook(_proxied("readers")) == Identity("kim", frozenset({Role.VIEWER}), None)
    # Two tenants name nobody; an admin of no tenant sees all.
    assert hook(_proxied("acme-ops,globex-ops")) is None
    admin = hook(_proxied("acme-ops,admins"))
    assert admin is not None and admin.tenant is None and Role.ADMIN in admin.roles
    # Once a group names a tenant, an operator in no group is not let in.
    assert hook(_proxied("strangers")) is None
    with pytest.raises(ValueError):
        sso_proxy(["10.0.0.5"], {"x": "operator@"})
    with pytest.raises(stead.InvalidTenant):
        sso_proxy(["10.0.0.5"], {"x": "operator@not a tenant"})
