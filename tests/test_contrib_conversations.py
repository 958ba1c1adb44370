"""The conversation of an SDK-driven run (stead.contrib: the OpenAI Agents SDK,
pydantic-ai, Strands, Google ADK), kept as stead's own model calls keep
theirs: each model call shows the messages it sent (system, user, assistant
with its tool calls, tool results) and its answer, each message is stored
once, a takeover that replays a call stores nothing again and shows the same;
nothing is kept under `App(keep_conversation=False)`; sealed at rest; on the
run page; and a journal written before the conversation was kept replays."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import stead
from stead.cli import main
from stead.conversations import transcript
from stead.run.steps import Steps
from stead.store.transactions.conversations import MODEL, Part
from stead.testing import CrashingStore, CrashPoint, DelegatingStore
from stead.web import create_app
from tests.helpers import Crash
from tests.workers.agents_app import lines

pytestmark = pytest.mark.usefixtures("sdk_dir")
ANSWER = "Paris: 12C / Paris: rain"


@dataclasses.dataclass(frozen=True)
class Sdk:
    package: str  # what the SDK's test app needs installed
    app: str  # its module in tests/workers
    prompt: str  # the user message the weather agent is sent
    system: str | None  # how its system message starts (None: it sends none)


SDKS = {
    "openai_agents": Sdk("agents", "agents_app", "Paris", "Answer with the weather."),
    "pydantic_ai": Sdk("pydantic_ai", "pydantic_app", "weather in Paris", None),
    "strands": Sdk("strands", "strands_app", "weather in Paris", None),
    "google_adk": Sdk("google.adk", "adk_app", "weather in Paris", "Answer with the weather."),
}


@pytest.fixture(params=list(SDKS))
def sdk(request: pytest.FixtureRequest) -> Sdk:
    found = SDKS[request.param]
    pytest.importorskip(found.package, reason="installed beside the dev set: "
                        "pip install --no-deps -r .ci/beside-dev.txt")
    return found


def _app(sdk: Sdk) -> ModuleType:
    return importlib.import_module(f"tests.workers.{sdk.app}")


def _crash() -> None:
    raise Crash()


class Saving(DelegatingStore):
    """Notes the names of the parts each model call's write stores."""

    def __init__(self, inner: stead.Store) -> None:
        super().__init__(inner)
        self.saved: list[list[str]] = []

    async def save_model_call(self, fence: Any, records: Any, resume: Any,
                              parts: Sequence[Part], outcome: Any = None) -> None:
        self.saved.append([p.name for p in parts])
        await self.inner.save_model_call(fence, records, resume, parts, outcome)


def _roles(messages: Sequence[Any]) -> list[str]:
    return [transcript.role(m) for m in messages]


async def test_a_tool_calling_run_shows_each_call_stores_each_message_once_across_a_takeover(
        sdk: Sdk, fstore: stead.Store, clock: stead.FakeClock, db_url: str) -> None:
    app = _app(sdk)
    client = stead.Client(fstore, app.app)
    info = await client.start(app.weather, "Paris")
    # The worker dies once the first tool result is journaled: after the
    # first model call, before the second.
    crashing = CrashingStore(fstore, CrashPoint(after_commit=1, name="forecast"), crash=_crash)
    await stead.Worker(app.app, crashing, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    [before] = await transcript.read(fstore, info.run_id)
    assert len(await fstore.conversation_parts(info.run_id)) == before.sent + 1  # and params

    clock.advance(31)
    saving = Saving(fstore)
    await stead.Worker(app.app, saving, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    assert await client.result(info.run_id) == ANSWER
    assert lines("model.log") == ["asked", "asked"]  # the first call was replayed

    first, second = calls = await transcript.read(fstore, info.run_id)
    assert [c.kept for c in calls] == [transcript.Kept.YES] * 2
    assert first == before  # the replay changed nothing of what the first call shows
    # The first call sent the instructions (if any) and the prompt, and asked for both tools.
    assert _roles(first.new) == [*(["system"] if sdk.system else []), "user"]
    if sdk.system:
        assert first.new[0]["content"].startswith(sdk.system)
    assert first.new[-1] == {"role": "user", "content": sdk.prompt}
    assert [c["name"] for c in first.tool_calls] == ["temperature", "forecast"]
    assert first.tool_calls[0]["arguments"] == {"city": "Paris"}
    assert first.text == ""
    # The second sent all that again, then the assistant's calls and their results.
    assert (second.earlier, second.sent) == (first.sent, first.sent + 3)
    assert _roles(second.new) == ["assistant", "tool", "tool"]
    called = second.new[0]["tool_calls"]
    assert [c["function"]["name"] for c in called] == ["temperature", "forecast"]
    assert [json.loads(c["function"]["arguments"]) for c in called] == [{"city": "Paris"}] * 2
    results = {m["content"] for m in second.new[1:]}
    assert any("Paris: 12C" in r for r in results) and any("Paris: rain" in r for r in results)
    assert second.text == ANSWER and second.tool_calls == []
    assert second.params == first.params and first.params["tools"]
    assert second.answer["usage"]["input_tokens"] > 0

    # Each message once, one set of parameters: the second worker stored the
    # three messages the first had not, nothing it had.
    assert len(await fstore.conversation_parts(info.run_id)) == second.sent + 1
    assert [len(s) for s in saving.saved] == [3]

    shown = await asyncio.to_thread(CliRunner().invoke, main, [
        "--db", db_url, "runs", "show", info.run_id, "--conversation", "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    assert [_roles(c["new"]) for c in data] == [_roles(first.new), _roles(second.new)]
    assert [c["earlier"] for c in data] == [0, first.sent]
    assert data[0]["answer"]["tool_calls"][1]["name"] == "forecast"
    assert data[1]["answer"]["text"] == ANSWER


async def test_a_wake_up_replays_the_agent_and_shows_the_same_conversation(
        sdk: Sdk, store: stead.Store) -> None:
    app = _app(sdk)
    client = stead.Client(store, app.app)
    info = await client.start(app.weather_twice, "Paris")
    await stead.Worker(app.app, store).run_until_idle()
    before = await transcript.read(store, info.run_id)
    parts = await store.conversation_parts(info.run_id)
    [w] = await client.waits(run_id=info.run_id)
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1", payload={})
    saving = Saving(store)
    await stead.Worker(app.app, saving).run_until_idle()
    assert (await client.get(info.run_id)).status == "completed"
    assert len(lines("model.log")) == 2  # nothing asked again
    assert saving.saved == []  # a replayed call writes nothing
    assert await transcript.read(store, info.run_id) == before
    assert await store.conversation_parts(info.run_id) == parts


async def test_nothing_is_kept_when_the_app_keeps_no_conversation(
        sdk: Sdk, store: stead.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(sdk)
    monkeypatch.setattr(app.app, "keep_conversation", False)
    client = stead.Client(store, app.app)
    info = await client.start(app.weather, "Paris")
    await stead.Worker(app.app, store).run_until_idle()
    assert await client.result(info.run_id) == ANSWER
    assert await store.conversation_parts(info.run_id) == {}
    calls = await transcript.read(store, info.run_id)
    assert [c.kept for c in calls] == [transcript.Kept.NO] * 2
    assert [c["name"] for c in calls[0].tool_calls] == ["temperature", "forecast"]
    assert calls[1].text == ANSWER
    kept = [json.loads(r.payload)[MODEL] for r in await client.journal(info.run_id)
            if MODEL in r.payload]
    assert len(kept) == 2 and not any("request" in k for k in kept)


@pytest.mark.parametrize("sealed", [True, False], ids=["encrypted", "clear"])
async def test_sealed_at_rest_and_readable_through_the_store(
        sqlite_url: str, sealed: bool) -> None:
    from tests.workers import agents_app

    email = "alice@example.com"
    store = await stead.open_store(sqlite_url, payloads=sealed)
    try:
        client = stead.Client(store, agents_app.app)
        info = await client.start(agents_app.weather, email)
        await stead.Worker(agents_app.app, store).run_until_idle()
        first, _ = await transcript.read(store, info.run_id)
        assert first.new[-1] == {"role": "user", "content": email}
        path = Path(sqlite_url.removeprefix("sqlite:///"))
        stored = b"".join(p.read_bytes() for p in path.parent.glob(f"{path.name}*")
                          if not p.name.endswith(".keys"))
        assert b"conversation_parts" in stored
        assert (email.encode() in stored) is not sealed
    finally:
        await store.close()


async def test_the_run_page_shows_each_sdk_model_call_as_a_turn(store: stead.Store) -> None:
    from tests.workers import agents_app

    client = stead.Client(store, agents_app.app)
    info = await client.start(agents_app.weather, "Paris")
    await stead.Worker(agents_app.app, store).run_until_idle()
    asgi = create_app(agents_app.app, store=store, public=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://127.0.0.1:8484") as web:
        page = await web.get(f"/runs/{info.run_id}", params={"tab": "conversation"})
        timeline = await web.get(f"/runs/{info.run_id}", params={"tab": "timeline"})
    assert page.status_code == 200
    turns = re.findall(r'<article class="turn".*?</article>', page.text, re.S)
    assert len(turns) == 2
    roles = [re.findall(r'<span class="role">(\w+)</span>', t) for t in turns]
    assert roles[0][:2] == ["system", "user"] and roles[1][:3] == ["assistant", "tool", "tool"]
    assert "Sent 2 messages." in turns[0]
    assert "Sent 5 messages: the first 2 as the turns before showed them." in turns[1]
    assert "forecast" in turns[0] and ANSWER in turns[1]
    # The step's row says what the model used and called, as a model call's does.
    assert "tokens 20 in / 5 out; tool calls: temperature, forecast" in turns[0]
    assert "tokens 20 in / 5 out; tool calls: temperature, forecast" in timeline.text


async def test_a_journal_written_before_the_conversation_was_kept_replays(
        store: stead.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.workers import agents_app

    async def as_before(self: Steps, name: str, fn: Any, *args: Any, said: Any) -> Any:
        return await self.step(name, fn, *args)  # a plain step: no answer, no request

    with monkeypatch.context() as m:
        m.setattr(Steps, "model_step", as_before)
        client = stead.Client(store, agents_app.app)
        info = await client.start(agents_app.weather_twice, "Paris")
        await stead.Worker(agents_app.app, store).run_until_idle()
    assert await transcript.read(store, info.run_id) == []
    [w] = await client.waits(run_id=info.run_id)
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1", payload={})
    await stead.Worker(agents_app.app, store).run_until_idle()
    result = await client.result(info.run_id)
    assert result["answer"] == ANSWER  # replayed: the digests are the step's, as before
    assert len(lines("model.log")) == 2
    assert await transcript.read(store, info.run_id) == []


async def test_a_fork_copies_the_parts_its_prefix_names(store: stead.Store) -> None:
    from tests.workers import agents_app

    client = stead.Client(store, agents_app.app)
    info = await client.start(agents_app.weather, "Paris")
    await stead.Worker(agents_app.app, store).run_until_idle()
    first, _ = await transcript.read(store, info.run_id)
    # The fork keeps the first model call and the tool results, not the second call.
    seq = max(r.seq for r in await client.journal(info.run_id) if MODEL in r.payload)
    fork = await client.fork(info.run_id, at=seq)
    assert await transcript.read(store, fork.run_id) == [
        dataclasses.replace(first, record=(await client.journal(fork.run_id))[0])]
    assert len(await store.conversation_parts(fork.run_id)) == first.sent + 1
