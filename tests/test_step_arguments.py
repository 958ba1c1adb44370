"""A step's arguments kept by parameter name in its journal record
(`Record.arguments`), both stores: positional and keyword alike, bounded,
secrets masked, never replayed; a record without them (journaled before)
replays and shows as ever; the run page shows them as a small table with
the JSON one click away; an exported run keeps them."""

from __future__ import annotations

import contextvars
import dataclasses
import json
from typing import Any

import httpx

import stead
from stead import codec
from stead.exports import StoredRun
from stead.records import RecordKind, RunStatus
from stead.run import steps
from stead.web import create_app

app = stead.App("argued")
calls: list[tuple[str, int]] = []


def price(order_id: str, quantity: int, *extras: str, currency: str = "EUR") -> dict[str, Any]:
    calls.append((order_id, quantity))
    return {"order": order_id, "total": 12 * quantity, "currency": currency, "extras": extras}


@app.workflow()
async def quote(run: stead.Run, order_id: str) -> Any:
    first = await run.step("price", price, order_id, 3, "gift", currency="CHF")
    again = await run.step("price", price, order_id, quantity=4)
    return [first, again, await run.step("plain", lambda: "no arguments")]


async def _settle(store: stead.Store) -> None:
    await stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01)).run_until_idle()


async def _quoted(store: stead.Store, order_id: str) -> tuple[stead.Client, str]:
    """A client and the id of a `quote` run for `order_id` that ran to its end."""
    client = stead.Client(store, app)
    run = await client.start("quote", order_id)
    await _settle(store)
    return client, run.run_id


def _steps(journal: list[stead.Record], name: str) -> list[stead.Record]:
    return [r for r in journal if r.kind == RecordKind.STEP and r.name == name]


async def test_a_steps_record_keeps_its_arguments_by_name_positional_and_keyword(
    store: stead.Store,
) -> None:
    client, run_id = await _quoted(store, "o-7731")
    journal = await client.journal(run_id)
    first, second = (json.loads(r.arguments or "null") for r in _steps(journal, "price"))
    assert first == {"args": ["o-7731", 3, "gift"], "kwargs": {"currency": "CHF"},
                     "names": ["order_id", "quantity", "extras[0]"]}
    assert second == {"args": ["o-7731"], "kwargs": {"quantity": 4}, "names": ["order_id"]}
    [plain] = _steps(journal, "plain")
    assert plain.arguments is None  # called with nothing: nothing kept
    assert all(r.arguments is None for r in journal if r.kind != RecordKind.STEP)


async def test_a_journal_without_arguments_replays_as_ever(store: stead.Store) -> None:
    """A run journaled before steps kept their arguments: its records have
    none, and a takeover replays them (the step is not called again)."""
    client, run_id = await _quoted(store, "o-1")
    stored = await client.export_run(run_id)
    old = tuple(r.evolve(arguments=None) for r in stored.journal)
    row = stored.run.evolve(run_id="0" * 32, status=RunStatus.RUNNING, result=None)
    # Cut to its first step: the takeover replays it and runs the rest live.
    first = next(r for r in old if r.kind == RecordKind.STEP)
    made = await client.import_run(dataclasses.replace(
        stored, run=row, journal=tuple(r for r in old if r.seq <= first.seq)))
    calls.clear()
    await _settle(store)
    assert (await client.get(made.run_id)).status == RunStatus.COMPLETED
    assert calls == [("o-1", 4)]  # the first price was replayed, only the second ran
    journal = await client.journal(made.run_id)
    assert [r.arguments is None for r in _steps(journal, "price")] == [True, False]


def test_what_a_step_keeps_of_its_arguments_is_bounded() -> None:
    big = "x" * 1_000_000
    many = list(range(100_000))
    text = steps.shown_arguments(price, (big, 1, *[f"e{i}" for i in range(40)]),
                                 {"currency": many})
    assert text is not None and len(text) < 6_000
    kept = json.loads(text)
    assert kept["args"][0] == "x" * 199 + "…"
    assert len(kept["args"]) == steps.ARGUMENTS_SHOWN
    assert kept["names"][:3] == ["order_id", "quantity", "extras[0]"]
    assert kept["kwargs"] == {"…": "23 more"}  # 42 values given, 20 kept, and the keyword
    listed = json.loads(steps.shown_arguments(price, (), {"order_id": many}) or "{}")
    assert listed["kwargs"]["order_id"][-1].startswith("… ")  # how many more it left out


def test_a_live_secret_among_a_steps_arguments_is_masked() -> None:
    secrets = codec.Secrets()
    secrets.add("stk1.k1.secret-token-value", "w-1")

    def shown() -> str | None:
        codec.watch(secrets)
        return steps.shown_arguments(price, ("o-1 stk1.k1.secret-token-value", 1), {})

    text = contextvars.copy_context().run(shown)
    assert text is not None and "secret-token-value" not in text and "o-1 ****" in text


async def test_the_run_page_shows_a_steps_arguments_by_name_with_the_json_a_click_away(
    store: stead.Store,
) -> None:
    _, run_id = await _quoted(store, "o-42")
    asgi = create_app(app, store=store, public=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://127.0.0.1:8484") as http:
        html = (await http.get(f"/runs/{run_id}?tab=timeline")).text
    assert html.count("<caption>called with</caption>") == 2  # the two priced steps
    assert '<th scope="row">quantity</th><td><code>3</code></td>' in html
    assert '<th scope="row">extras[0]</th><td><code>gift</code></td>' in html
    assert '<th scope="row">currency</th><td><code>CHF</code></td>' in html
    assert "&#34;names&#34;: [\n    &#34;order_id&#34;" in html  # the JSON, one click away


async def test_an_exported_run_keeps_its_steps_arguments(store: stead.Store) -> None:
    client, run_id = await _quoted(store, "o-5")
    stored = await client.export_run(run_id)
    text = stored.dumps()
    back = StoredRun.loads(text)
    assert [r.arguments for r in back.journal] == [r.arguments for r in stored.journal]
    plain = json.loads(text)["journal"]
    assert sum("arguments" in r for r in plain) == 2  # left out where there are none
