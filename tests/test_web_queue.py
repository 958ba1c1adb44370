"""The needs-a-human page and what an operator does there, over HTTP (both
stores): every open approval listed, counts and filters, the whole error and
the unknown effect's arguments, confirmation of destructive actions, the way
back, bulk actions, roles (an auth hook's, an SSO proxy's), and the audit in
`stead runs show`. tests/test_web_browser.py drives the same in Chromium."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stead
from stead import operator
from stead.records import RunStatus
from stead.roles import Role
from stead.web import Identity, actions, create_app, queue, sso_proxy
from tests import stress, web_app
from tests.ops_app import cli
from tests.web_app import UI_TOKEN, csrf_of, log_in, settle

BASE = "http://127.0.0.1:8484"


@pytest.fixture
async def web(store: stead.Store) -> AsyncIterator[httpx.AsyncClient]:
    asgi = create_app(web_app.app, store=store, token=UI_TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url=BASE) as http:
        yield http


def _rows(html: str) -> list[str]:
    """The run ids of the queue's rows, in order."""
    return re.findall(r'<li class="item [a-z_]+" id="q-[0-9a-f]+"[^>]*? data-version="[0-9a-f]+"'
                      r' data-kind="[a-z_]+" data-run="([0-9a-f]+)"', html)


async def test_the_queue_lists_every_open_approval_by_due_time_with_counts_and_filters(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, web_app.app)
    later = await client.start("long_review", "48", task_id="order-48")
    soon = await client.start("expiring", "T-1", task_id="ticket-T-1")
    unknown = await client.start("refund", "7", task_id="order-7")
    await settle(store)
    await log_in(web)
    page = (await web.get("/attention")).text
    # stopped runs first, then approvals by due time: the 48 h one is listed too
    assert _rows(page) == [unknown.run_id, soon.run_id, later.run_id]
    assert "approval 2" in page and "outcome_unknown 1" in page
    assert re.search(r">4[78]\.\d h left<", page)  # due in two days
    only = (await web.get("/attention", params={"kind": "approval"})).text
    assert _rows(only) == [soon.run_id, later.run_id]
    by_task = (await web.get("/attention", params={"task": "order-48"})).text
    assert _rows(by_task) == [later.run_id]
    by_workflow = (await web.get("/attention", params={"workflow": "refund@1"})).text
    assert _rows(by_workflow) == [unknown.run_id]
    assert _rows((await web.get("/attention", params={"workflow": "refund@2"})).text) == []
    old = (await web.get("/attention", params={"age": "1d"})).text
    assert _rows(old) == [] and "under this filter" in old
    # the live fragment keeps the filter
    assert 'data-poll-url="/attention?fragment=1&amp;kind=approval"' in only
    fragment = (await web.get("/attention", params={"fragment": "1", "kind": "approval"})).text
    assert _rows(fragment) == [soon.run_id, later.run_id] and "<html" not in fragment


async def test_an_unknown_effect_shows_its_arguments_key_and_the_whole_error(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, web_app.app)
    unknown = await client.start("refund", "7")
    await settle(store)
    info = await client.get(unknown.run_id)
    assert "stead reconcile" in info.error["message"]
    await log_in(web)
    page = (await web.get("/attention")).text
    assert "stead reconcile" not in page  # the form below it decides, not a command
    assert "no check to ask." in page
    stop = info.outcome_unknown
    assert stop is not None
    assert f'title="{stop.key}"' in page and "dispatch_refund" in page
    # the arguments by the effect's parameter names, the JSON one click away
    assert stop.arguments == {"args": ["7"], "kwargs": {}, "names": ["order"]}
    assert '<th scope="row">order</th><td><code>7</code></td>' in page
    shown = re.search(r'<summary>JSON</summary><pre tabindex="0">(.*?)</pre>', page, re.S)
    assert shown is not None
    assert json.loads(shown.group(1).replace("&#34;", '"')) == stop.arguments
    # no Retry: the effect has no check, so a retry would only stop on it again
    assert 'data-action="retry"' not in page and 'data-action="reconcile"' in page


async def test_a_wait_is_decided_on_the_question_it_asks_not_its_digest(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, web_app.app)
    run = await client.start("asking", 4711)
    await settle(store)
    await log_in(web)
    for page in ((await web.get("/attention", params={"kind": "approval"})).text,
                 (await web.get(f"/runs/{run.run_id}")).text):
        assert "&#34;ticket&#34;: 4711" in page and "&#34;amount&#34;: 4200" in page
        assert "&lt;b&gt;refund?&lt;/b&gt;" in page and "<b>refund?" not in page
        assert "token=[token]" in page and "abcdefgh0123456789" not in page  # masked
    queue_page = (await web.get("/attention", params={"kind": "approval"})).text
    assert _rows(queue_page) == [run.run_id]  # asked of a person, though it takes no token
    assert 'data-action="approve"' in queue_page and 'name="token"' not in queue_page
    form = await _form(web, "/attention", why="the customer called", target=(
        await client.waits(run_id=run.run_id))[0].wait_id, expect_status="waiting")
    r = await web.post(f"/runs/{run.run_id}/actions/approve", data=form)
    assert r.status_code == 200, r.text
    await settle(store)
    assert await client.result(run.run_id, timeout=5) == {"approved": True}


async def _form(web: httpx.AsyncClient, path: str, **fields: str) -> dict[str, str]:
    page = await web.get(path)
    return {"csrf": csrf_of(page.text), **fields}


async def test_a_destructive_action_needs_its_confirmation_and_leads_back(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, web_app.app)
    run = await client.start("approval", "1")
    await settle(store)
    await log_in(web)
    page = (await web.get("/attention", params={"kind": "approval"})).text
    assert 'name="confirm" value="yes" required' in page  # the cancel form asks first
    form = await _form(web, "/attention", why="duplicate order", expect_status="waiting",
                       next="/attention?kind=approval")
    r = await web.post(f"/runs/{run.run_id}/actions/cancel", data=form)
    assert r.status_code == 400 and "Nothing was done" in r.text
    assert (await client.get(run.run_id)).status == RunStatus.WAITING
    assert await store.list_actions(run.run_id) == []
    r = await web.post(f"/runs/{run.run_id}/actions/cancel", data={**form, "confirm": "yes"})
    assert r.status_code == 200, r.text
    assert 'href="/attention?kind=approval" class="back"' in r.text
    assert (await client.get(run.run_id)).status == RunStatus.CANCELLED
    # a `next` off this dashboard leads to the queue instead
    for away in ("https://evil.example/", "//evil.example/x", "/\\evil", "javascript:x"):
        again = await web.post(f"/runs/{run.run_id}/actions/cancel",
                               data={**form, "confirm": "yes", "next": away})
        assert 'href="/attention" class="back"' in again.text, away


async def test_a_bulk_action_decides_each_picked_run_with_one_why(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, web_app.app)
    first = await client.start("refund", "1")
    second = await client.start("refund", "2")
    moved = await client.start("refund", "3")
    await settle(store)
    await log_in(web, "dana")
    page = (await web.get("/attention")).text
    picks = re.findall(r'name="pick" form="bulk" value="([^"]+)"', page)
    assert len(picks) == 3
    await client.reconcile(moved.run_id, "dispatch_refund", not_happened=True, by="eve",
                           why="meanwhile")
    r = await web.post("/attention/actions/bulk", data={
        "csrf": csrf_of(page), "action": "reconcile", "decision": "happened",
        "result": '{"refund": "batch"}', "why": "the bank's export lists all three",
        "pick": picks, "next": "/attention?kind=outcome_unknown"})
    assert r.status_code == 200, r.text
    assert "2 of 3 done" in r.text and 'href="/attention?kind=outcome_unknown"' in r.text
    outcomes = dict(re.findall(r'<code title="([0-9a-f]+)">.*?</code></a></td><td>(\w+)</td>',
                               r.text))
    assert outcomes == {first.run_id: "done", second.run_id: "done", moved.run_id: "refused"}
    for run_id in (first.run_id, second.run_id):
        [audit] = await store.list_actions(run_id)
        assert (audit.author, audit.why, audit.outcome) == (
            "dana", "the bank's export lists all three", "done")
    [refused] = await store.list_actions(moved.run_id)
    assert refused.outcome == "refused" and "moved on" in refused.detail
    # only the actions offered for many at once, and never without a why
    nope = await web.post("/attention/actions/bulk", data={
        "csrf": csrf_of(page), "action": "fork", "why": "x", "pick": picks})
    assert nope.status_code == 400
    blank = await web.post("/attention/actions/bulk", data={
        "csrf": csrf_of(page), "action": "retry", "why": " ", "pick": picks})
    assert blank.status_code == 400
    unconfirmed = await web.post("/attention/actions/bulk", data={
        "csrf": csrf_of(page), "action": "cancel", "why": "wrong batch", "pick": picks})
    assert unconfirmed.status_code == 400 and "Nothing was done" in unconfirmed.text
    assert (await client.get(first.run_id)).status != RunStatus.CANCELLED


async def test_each_action_needs_its_role_and_a_refusal_is_audited(store: stead.Store) -> None:
    held: dict[str, frozenset[Role]] = {"roles": frozenset({Role.VIEWER})}
    asgi = create_app(web_app.app, store=store,
                      auth=lambda request: Identity("vic", held["roles"]))
    client = stead.Client(store, web_app.app)
    run = await client.start("approval", "5")
    await settle(store)
    [wait] = await client.waits(run_id=run.run_id)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url=BASE) as web:
        page = (await web.get(f"/runs/{run.run_id}")).text
        # a viewer is shown no form at all, only who may act
        assert "needs the role approver" in page and 'action="/runs/' not in page
        assert "disabled" not in page
        queued = (await web.get("/attention")).text  # no bulk action a viewer may take
        assert 'id="bulk"' not in queued and 'name="pick"' not in queued
        form = {"csrf": csrf_of(page), "target": wait.wait_id, "why": "looks fine",
                "expect_status": "waiting"}
        r = await web.post(f"/runs/{run.run_id}/actions/approve", data=form)
        assert r.status_code == 403 and "needs the role approver" in r.text
        [audit] = await store.list_actions(run.run_id)
        assert (audit.action, audit.author, audit.outcome) == ("approve", "vic", "refused")
        assert await client.events(run.run_id) == []
        held["roles"] = frozenset({Role.APPROVER})
        r = await web.post(f"/runs/{run.run_id}/actions/cancel",
                           data={**form, "target": "", "confirm": "yes"})
        assert r.status_code == 403 and "needs the role operator" in r.text
        r = await web.post(f"/runs/{run.run_id}/actions/approve", data=form)
        assert r.status_code == 200 and "Accepted: event" in r.text, r.text


async def test_an_sso_proxys_headers_name_the_operator_only_from_the_proxy(
    store: stead.Store,
) -> None:
    hook = sso_proxy(["127.0.0.1"], {"ops": Role.OPERATOR, "finance": "approver"})
    asgi = create_app(web_app.app, store=store, auth=hook)
    client = stead.Client(store, web_app.app)
    run = await client.start("approval", "6")
    await settle(store)

    def from_address(host: str) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=asgi, client=(host, 5000))
        return httpx.AsyncClient(transport=transport, base_url=BASE)

    as_finance = {"X-Forwarded-User": "fay", "X-Forwarded-Groups": "staff, finance"}
    async with from_address("127.0.0.1") as web:
        page = await web.get(f"/runs/{run.run_id}", headers=as_finance)
        assert page.status_code == 200 and "fay" in page.text
        assert 'data-action="approve"' in page.text
        assert "needs the role operator" in page.text  # cancel: fay only approves
        nobody = await web.get(f"/runs/{run.run_id}", headers={"X-Forwarded-User": ""})
        assert nobody.status_code == 401
        viewer = await web.get(f"/runs/{run.run_id}", headers={"X-Forwarded-User": "val"})
        assert viewer.status_code == 200 and "needs the role approver" in viewer.text
        many = ",".join(f"g{i}" for i in range(500))
        flood = await web.get(f"/runs/{run.run_id}",
                              headers={"X-Forwarded-User": "fay", "X-Forwarded-Groups": many})
        assert flood.status_code == 401
    async with from_address("10.9.9.9") as web:  # not the proxy: its headers are not believed
        assert (await web.get(f"/runs/{run.run_id}", headers=as_finance)).status_code == 401


def test_runs_show_lists_the_operator_audit(db_url: str) -> None:
    async def decide() -> str:
        store = await stead.open_store(db_url)
        try:
            client = stead.Client(store, web_app.app)
            run = await client.start("approval", "8")
            await settle(store)
            decision = operator.Decision(run_id=run.run_id, target="", values={}, by="olga",
                                         why="customer asked")
            with pytest.raises(stead.NotAllowed):
                await operator.act(client, "cancel", decision, roles=[Role.APPROVER])
            await operator.act(client, "cancel", decision)
            return run.run_id
        finally:
            await store.close()

    run_id = asyncio.run(decide())
    shown = cli(db_url, "runs", "show", run_id)
    assert shown.exit_code == 0, shown.output
    text = shown.output
    assert "operator actions (2)\n" in text and "customer asked" in text
    assert text.index("refused") < text.index("done")
    data = json.loads(cli(db_url, "runs", "show", run_id, "--json").output)
    assert [(a["action"], a["author"], a["outcome"]) for a in data["operator_actions"]] == [
        ("cancel", "olga", "refused"), ("cancel", "olga", "done")]


@settings(max_examples=stress.examples(200), deadline=None)
@given(st.text(alphabet=st.sampled_from("ab cd,;:é"), max_size=400))
def test_a_short_summary_is_cut_at_a_word_and_within_bounds(text: str) -> None:
    brief = queue.short(text, 60)
    if len(text) <= 60:
        assert brief == text
        return
    assert brief.endswith(" …") and len(brief) <= 62
    kept = brief[:-2]
    assert text.startswith(kept)
    if " " in text[:60]:  # cut where a word ends, never inside one
        assert text[len(kept)] in " ,;:" or text[len(kept) - 1] in " ,;:"


def test_a_message_is_shown_without_the_commands_it_names() -> None:
    paused = ("policy 1 paused the run: amount over 100. Decide: stead runs resume RUN "
              "--by WHO --why WHY [--intent FILE], stead grants renew RUN TOOL ..., or "
              "stead runs terminate RUN --by WHO --why WHY")
    assert queue.without_commands(paused) == "policy 1 paused the run: amount over 100."
    retry = "the code changed; deploy it, then `stead runs retry RUN`; or cancel the run."
    assert queue.without_commands(retry) == "the code changed; deploy it"
    assert queue.without_commands("nothing to run here") == "nothing to run here"


def test_stead_ui_takes_only_known_roles_for_proxy_groups(sqlite_url: str) -> None:
    assert cli(sqlite_url, "db", "migrate").exit_code == 0
    bad = cli(sqlite_url, "ui", "tests.web_app:app", "--trusted-proxy", "127.0.0.1",
              "--proxy-group", "ops=root")
    assert bad.exit_code != 0 and "ROLE one of viewer, approver, operator, admin" in bad.output
    alone = cli(sqlite_url, "ui", "tests.web_app:app", "--proxy-group", "ops=admin")
    assert alone.exit_code != 0 and "needs --trusted-proxy" in alone.output


@settings(max_examples=stress.examples(300), deadline=None)
@given(st.one_of(st.text(max_size=60), st.text(alphabet="/\\:.@?#%&=ahtps-_", max_size=40)))
def test_the_way_back_never_leaves_the_dashboard(text: str) -> None:
    back = actions.safe_next(text)
    parts = urllib.parse.urlsplit(back)
    assert back.startswith("/") and not back.startswith("//")
    assert (parts.scheme, parts.netloc) == ("", "") and "\\" not in back
    assert back in (text, actions.HOME)


async def test_a_rows_version_changes_with_what_it_shows_not_with_the_minutes_left(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    client = stead.Client(fstore, web_app.app)
    run = await client.start("expiring", "T-9", task_id="ticket-T-9")
    await stead.Worker(web_app.app, fstore).run_until_idle()

    async def the_row() -> queue.Row:
        [row] = (await queue.read(client, queue.Filter(), clock.now())).rows
        return row

    before = await the_row()
    assert before.about == "wait review"  # its id and expiry have columns of their own
    assert before.bound == (("ticket", "T-9"), ("state_version", "1"))
    clock.advance(7 * 60)  # "20 min left" is "13 min left" now: no change to decide on
    after = await the_row()
    assert after.version == before.version and after.key == before.key
    info = await client.get(run.run_id)
    assert before.status == f"waiting at epoch {info.epoch}"


async def test_a_rows_details_hold_the_runs_input_by_name_and_its_last_resume(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, web_app.app)
    paused = await client.start("granted", "9", intent=web_app.expired_grant())
    await settle(store)
    await log_in(web)
    page = (await web.get("/attention")).text
    row = page.split(f'data-run="{paused.run_id}"')[1].split("</li>")[0]
    assert '<th scope="row">order_id</th><td><code>9</code></td>' in row  # its input, by name
    assert "Since its last resume (epoch 1)" in row and "continue (policy none)" in row
    assert '<th scope="row">judged</th>' in row  # the action its policy judged
    # Its intent is shown in the detail, not linked to.
    assert '<pre tabindex="0" class="intent">intent v1: refund order 9' in row
    assert "<summary>JSON</summary>" in row  # the input's JSON, one click away


async def test_a_rows_details_show_the_conversation_that_led_to_the_approval(
    web: httpx.AsyncClient, store: stead.Store,
) -> None:
    client = stead.Client(store, web_app.app)
    run = await client.start("advised", "o-7731", 4217)
    await settle(store)
    await log_in(web)
    page = (await web.get("/attention")).text
    row = page.split(f'data-run="{run.run_id}"')[1].split("</li>")[0]
    assert "The conversation: the model's last turn</h3>" in row
    assert '<p class="said">Order o-7731 was charged twice; refund 4217.</p>' in row
    assert '<th scope="row">amount</th><td><code>4217</code></td>' in row  # its input by name
    assert "class=\"intent\"" not in row  # no intent declared: none shown
