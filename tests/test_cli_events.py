"""`stead approve`, `stead reject`, `stead events ls`, `stead waits ls`."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import stead
from stead.cli import main
from stead.workflow.waits import sign


def _app() -> stead.App:
    app = stead.App("t")

    @app.workflow()
    async def confirm(run: stead.Run, order: str) -> Any:
        w = await run.wait("user_confirmation", bind={"order_id": order})
        answer = await w
        return answer

    return app


async def _waiting(url: str, orders: list[str]) -> list[tuple[str, str, str]]:
    store = await stead.open_store(url)
    try:
        app = _app()
        client = stead.Client(store, app)
        ids = [(await client.start("confirm", o)).run_id for o in orders]
        await stead.Worker(app, store).run_until_idle()
        out = []
        for run_id in ids:
            [w] = await client.waits(run_id=run_id)
            key = (await store.keyring()).current  # as the worker signed it
            out.append((run_id, w.wait_id, sign(key, run_id, w.wait_id)))
        return out
    finally:
        await store.close()


async def _finish(url: str) -> list[Any]:
    store = await stead.open_store(url)
    try:
        app = _app()
        await stead.Worker(app, store).run_until_idle()
        client = stead.Client(store, app)
        return [r.result for r in await client.list_runs(status="completed")]
    finally:
        await store.close()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/stead.db"


def test_approve_reject_and_list(url: str) -> None:
    [(a, wait_a, token_a), (b, wait_b, token_b)] = asyncio.run(_waiting(url, ["123", "456"]))
    runner = CliRunner()

    def stead_(*args: str) -> Any:
        return runner.invoke(main, ["--db", url, *args])

    listed = stead_("waits", "ls")
    assert listed.exit_code == 0 and wait_a in listed.output and wait_b in listed.output
    assert '"order_id":"123"' in listed.output

    bad = stead_("approve", a, "--wait", wait_a, "--token", "stk_wrong")
    assert bad.exit_code == 1 and "bad token" in bad.output
    mismatch = stead_("approve", a, "--wait", wait_a, "--token", token_a,
                      "--bind", '{"order_id": "999"}')
    assert mismatch.exit_code == 1 and "bound value mismatch (order_id)" in mismatch.output
    ok = stead_("approve", a, "--wait", wait_a, "--token", token_a, "--payload", '{"note": "go"}')
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("Accepted: ") and 'order_id="123"' in ok.output
    again = stead_("approve", a, "--wait", wait_a, "--token", token_a, "--payload",
                   '{"note": "go"}')
    assert again.exit_code == 0 and again.output.startswith("Duplicate: ")

    no = stead_("reject", b, "--kind", "user_confirmation", "--token", token_b,
                "--reason", "changed my mind")
    assert no.exit_code == 0, no.output

    events = stead_("events", "ls", a, "--json")
    assert events.exit_code == 0
    verdicts = [(e["verdict"], e["reason"]) for e in json.loads(events.output)]
    assert verdicts == [("rejected", "bad_token"), ("rejected", "bound_value_mismatch"),
                        ("accepted", None)]
    assert "no open waits" in stead_("waits", "ls").output
    assert len(json.loads(stead_("waits", "ls", "--all", "--json").output)) == 2

    results = asyncio.run(_finish(url))
    assert {"approved": True, "note": "go"} in results
    assert {"approved": False, "reason": "changed my mind"} in results


def test_usage_errors(url: str) -> None:
    [(a, wait_a, token_a)] = asyncio.run(_waiting(url, ["1"]))
    runner = CliRunner()
    both = runner.invoke(main, ["--db", url, "approve", a, "--wait", wait_a, "--kind", "x",
                                "--token", token_a])
    assert both.exit_code == 1 and "name the wait" in both.output
    bad_json = runner.invoke(main, ["--db", url, "approve", a, "--wait", wait_a, "--token",
                                    token_a, "--payload", "[1"])
    assert bad_json.exit_code == 1
    unknown = runner.invoke(main, ["--db", url, "events", "ls", "nope"])
    assert unknown.exit_code == 1 and "no run" in unknown.output


def test_db_migrate(url: str, tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["--db", url, "db", "migrate"])
    assert out.exit_code == 0 and "schema 0 -> " in out.output, out.output
    assert (tmp_path / "stead.db").exists()
    again = CliRunner().invoke(main, ["--db", url, "db", "migrate"])
    assert again.exit_code == 0


def _asking_app() -> stead.App:
    """A wait without a token (whoever reaches the database answers it), with
    or without the request a person is shown."""
    app = stead.App("t")

    @app.workflow()
    async def ask(run: stead.Run, ticket: int, asks: bool) -> Any:
        options: dict[str, Any] = {"token": False}
        if asks:
            options["request"] = {"ticket": ticket, "amount": 4200, "order": "123",
                                  "note": "x" * 300}
        w = await run.wait("interrupt", bind={"ticket": ticket}, **options)
        return await w

    return app


async def _asking(url: str, tickets: list[int], *, asks: bool = True
                  ) -> list[tuple[str, str]]:
    store = await stead.open_store(url)
    try:
        app = _asking_app()
        client = stead.Client(store, app)
        ids = [(await client.start("ask", t, asks)).run_id for t in tickets]
        await stead.Worker(app, store).run_until_idle()
        return [(run_id, (await client.waits(run_id=run_id))[0].wait_id) for run_id in ids]
    finally:
        await store.close()


def test_a_wait_without_a_token_is_answered_without_one_and_refuses_one(url: str) -> None:
    [(a, wait_a), (b, wait_b)] = asyncio.run(_asking(url, [4711, 4712], asks=False))
    runner = CliRunner()

    def stead_(*args: str) -> Any:
        return runner.invoke(main, ["--db", url, *args])

    dummy = stead_("approve", b, "--wait", wait_b, "--token", "anything")
    assert dummy.exit_code == 1 and f"wait {wait_b} of run {b} takes no token" in dummy.output
    ok = stead_("approve", a, "--wait", wait_a)
    assert ok.exit_code == 0 and ok.output.startswith("Accepted: "), ok.output
    no = stead_("reject", b, "--kind", "interrupt", "--reason", "not this one")
    assert no.exit_code == 0 and no.output.startswith("Accepted: "), no.output
    assert asyncio.run(_finish_asking(url)) == [{"approved": True}, {
        "approved": False, "reason": "not this one"}]


async def _finish_asking(url: str) -> list[Any]:
    store = await stead.open_store(url)
    try:
        app = _asking_app()
        await stead.Worker(app, store).run_until_idle()
        runs = await stead.Client(store, app).list_runs(status="completed")
        return [r.result for r in sorted(runs, key=lambda r: r.created_at)]
    finally:
        await store.close()


def test_waits_show_what_they_ask(url: str) -> None:
    [(a, wait_a)] = asyncio.run(_asking(url, [4711]))
    runner = CliRunner()

    def stead_(*args: str) -> Any:
        return runner.invoke(main, ["--db", url, *args])

    [line] = stead_("waits", "ls").output.splitlines()
    assert 'token=no  asks={"ticket": 4711, "amount": 4200, "order": "123", "note": "xxx' in line
    asks = line.split("asks=")[1].split("  bind=")[0]
    assert len(asks) == 120 and asks.endswith("…")  # bounded on a line
    shown = stead_("waits", "show", wait_a).output
    assert '    "ticket": 4711,' in shown and "x" * 300 in shown  # whole
    assert "token     none: it was opened without one" in shown
    assert f"answer    stead approve {a} --wait {wait_a}\n" in shown
    [listed] = json.loads(stead_("waits", "ls", "--json").output)
    assert listed["request"]["amount"] == 4200 and listed["takes_token"] is False
    missing = stead_("waits", "show", "nope")
    assert missing.exit_code == 1 and "no wait nope" in missing.output


def test_approve_takes_the_link_as_it_was_sent(url: str, tmp_path: Path) -> None:
    [(a, wait_a, token_a), (b, wait_b, token_b), (c, wait_c, token_c)] = asyncio.run(
        _waiting(url, ["1", "2", "3"]))
    runner = CliRunner()

    def link(run_id: str, wait_id: str, token: str) -> str:
        query = urllib.parse.urlencode({"run": run_id, "wait": wait_id, "token": token})
        return f"https://shop.example/approve?{query}"

    def stead_(*args: str, stdin: str | None = None) -> Any:
        return runner.invoke(main, ["--db", url, *args], input=stdin)

    shown = stead_("waits", "show", wait_a).output
    assert "token     yes" in shown and "stead approve --link - (paste the link sent)" in shown
    pasted = stead_("approve", "--link", "-", stdin=link(a, wait_a, token_a) + "\n")
    assert pasted.exit_code == 0 and pasted.output.startswith("Accepted: "), pasted.output
    (tmp_path / "link.txt").write_text(link(b, wait_b, token_b))
    filed = stead_("reject", b, "--link-file", str(tmp_path / "link.txt"), "--reason", "no")
    assert filed.exit_code == 0 and filed.output.startswith("Accepted: "), filed.output
    typed = stead_("approve", "--link", link(c, wait_c, token_c))
    assert typed.exit_code == 0 and typed.output.startswith("Accepted: "), typed.output

    other_run = stead_("approve", b, "--link", "-", stdin=link(a, wait_a, token_a))
    assert other_run.exit_code == 1 and "the link's is" in other_run.output
    twice = stead_("approve", "--link", "-", "--token", token_a, stdin=link(a, wait_a, token_a))
    assert twice.exit_code == 1 and "carries its token" in twice.output
    not_a_link = stead_("approve", "--link", "https://shop.example/approve?run=" + a)
    assert not_a_link.exit_code == 1 and "not an approval link" in not_a_link.output
    nothing = stead_("approve", "--wait", wait_a)
    assert nothing.exit_code == 1 and "name the run" in nothing.output
