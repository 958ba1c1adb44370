"""The conversation each model call saw, kept with its record: stored once
per message (linear in the turns), read back turn by turn, identically after
a takeover, masked where it held a wait token, gone with its run, copied
with a fork, and not kept at all under `App(keep_conversation=False)`; on
both stores."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import stead
from stead.cli import main
from stead.conversations import transcript
from stead.records import RecordKind
from stead.web import create_app
from tests import sdk_agents
from tests.helpers import Crash, crash_then_resume

SYSTEM = {"role": "system", "content": "You look things up. " + "x" * 200}


def _tool_reply(turn: int) -> stead.Completion:
    return stead.Completion(text=f"looking up {turn}", tool_calls=(
        stead.ToolCall(f"call-{turn}", "lookup", {"n": turn}),), model="m", stop_reason="tool")


def _script(turns: int) -> list[stead.llm.scripted.Reply]:
    return [*(_tool_reply(t) for t in range(turns)), "done"]


def agent_app(turns: int, *, keep: bool = True, crash_at: int | None = None,
              name: str = "agents") -> tuple[stead.App, Any, stead.ScriptedModel]:
    """An agent loop: each turn the model asks for a tool, whose result is
    appended to the conversation; `crash_at` kills the worker once, after
    that turn's tool result is journaled."""
    app = stead.App(name, keep_conversation=keep)
    model = stead.ScriptedModel(_script(turns))
    crashed: list[bool] = []

    def lookup(n: int) -> dict[str, Any]:
        if n == crash_at and not crashed:
            crashed.append(True)
            raise Crash()
        return {"n": n, "found": "y" * 100}

    @app.workflow(version=1)
    async def agent(run: stead.Run, question: str) -> str:
        messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": question}]
        while True:
            answer = await run.llm("agent", model, messages, temperature=0)
            if not answer.tool_calls:
                return answer.text
            messages.append({"role": "assistant", "content": answer.text, "tool_calls": [
                c.to_json() for c in answer.tool_calls]})
            for c in answer.tool_calls:
                result = await run.step(f"tool {c.name}", lookup, c.arguments["n"])
                messages.append({"role": "tool", "tool_call_id": c.id,
                                 "content": json.dumps(result)})

    return app, agent, model


async def finished_agent(store: stead.Store, turns: int, **kw: Any
                         ) -> tuple[stead.Client, str, stead.ScriptedModel]:
    """An agent of `turns` tool calls run to its end: its client, run id, model."""
    app, agent, model = agent_app(turns, **kw)
    client = stead.Client(store, app)
    info = await client.start(agent, "what is n?")
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id) == "done"
    return client, info.run_id, model


def _whole(calls: Sequence[transcript.Call]) -> list[list[Any]]:
    """Each call's whole list, rebuilt from what each call added (an agent's
    conversation only grows: a call's earlier messages are the last list's)."""
    lists: list[list[Any]] = []
    for c in calls:
        before = lists[-1][:c.earlier] if lists else []
        lists.append([*before, *c.new])
    return lists


def _plain(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    return json.loads(json.dumps(list(messages)))


async def test_each_call_shows_what_it_sent_and_each_message_is_stored_once(
        store: stead.Store) -> None:
    client, run_id, model = await finished_agent(store, 5)
    calls = await transcript.read(store, run_id)
    assert [c.kept for c in calls] == [transcript.Kept.YES] * 6
    assert _whole(calls) == [_plain(m) for m in model.calls]
    # Turn by turn: the first call sends system and user, each later one
    # the assistant's tool call and the tool's result.
    assert [len(c.new) for c in calls] == [2, 2, 2, 2, 2, 2]
    assert [c.earlier for c in calls] == [0, 2, 4, 6, 8, 10]
    assert calls[0].params == {"temperature": 0}
    assert calls[1].new[0]["tool_calls"][0]["name"] == "lookup"
    # 12 distinct messages and one set of parameters, however many calls sent them.
    parts = await store.conversation_parts(run_id)
    assert len(parts) == 13
    records = [r for r in await client.journal(run_id) if r.kind == RecordKind.LLM]
    sizes = [len(r.payload) for r in records[:-1]]  # the answers that call a tool
    assert max(sizes) - min(sizes) < 40  # a record names its list; it does not hold it


async def test_the_digest_does_not_depend_on_keeping_the_conversation(
        store: stead.Store) -> None:
    digests = []
    for keep in (True, False):
        app, agent, _ = agent_app(2, keep=keep)
        client = stead.Client(store, app)
        info = await client.start(agent, "q")
        await stead.Worker(app, store).run_until_idle()
        journal = await client.journal(info.run_id)
        digests.append([r.digest for r in journal if r.kind == RecordKind.LLM])
        payloads = [json.loads(r.payload) for r in journal if r.kind == RecordKind.LLM]
        assert all(("request" in p) is keep for p in payloads)
        if not keep:
            assert await store.conversation_parts(info.run_id) == {}
            calls = await transcript.read(store, info.run_id)
            assert {c.kept for c in calls} == {transcript.Kept.NO}
            assert calls[0].tool_calls[0]["name"] == "lookup"
    assert digests[0] == digests[1]


async def test_a_takeover_replays_and_reads_the_conversation_back_identically(
        fstore: stead.Store, clock: stead.FakeClock) -> None:
    app, agent, model = agent_app(4, crash_at=1)
    client = stead.Client(fstore, app)
    info = await client.start(agent, "what is n?")
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id) == "done"
    [resumed] = await client.resumes(info.run_id)
    assert resumed.details.kinds == {"llm": 2, "step": 1}  # replayed, not asked again
    calls = await transcript.read(fstore, info.run_id)
    # The model was asked once per turn over both workers: the replay asked
    # nothing again, and what was stored reads back as what was sent.
    assert len(model.calls) == len(calls) == 5
    assert _whole(calls) == [_plain(m) for m in model.calls]
    # The second worker stored only what the first had not.
    assert len(await fstore.conversation_parts(info.run_id)) == 11

    # A third reading, by a fresh process's view of the same rows, agrees.
    again = transcript.calls(await client.journal(info.run_id),
                             await fstore.conversation_parts(info.run_id))
    assert again == calls


async def test_a_wait_token_in_a_message_is_stored_masked(store: stead.Store) -> None:
    app = stead.App("tokens")
    model = stead.ScriptedModel(["sent"])

    @app.workflow(version=1)
    async def ask(run: stead.Run) -> str:
        w = await run.wait("approval", expires_in=3600)
        # The token's text, come by a way the journal does not see (a tool
        # that read it back from where the effect sent it).
        said = f"approve with {w.token._value}"
        await run.llm("draft", model, [{"role": "user", "content": said},
                                       {"role": "user", "content": w.token}])
        return "asked"

    client = stead.Client(store, app)
    info = await client.start(ask)
    await stead.Worker(app, store).run_until_idle()
    token = model.calls[0][0]["content"].split()[-1]
    assert token.startswith("stk")
    bodies = [p.body for p in (await store.conversation_parts(info.run_id)).values()]
    assert not any(token in b for b in bodies)
    calls = await transcript.read(store, info.run_id)
    assert calls[0].new[0] == {"role": "user", "content": "approve with ****"}
    assert token not in json.dumps(calls[0].new[1])  # the Token: stored as its wait


async def test_prune_deletes_the_conversation_and_a_fork_copies_its_prefix(
        store: stead.Store) -> None:
    client, run_id, _ = await finished_agent(store, 3)
    journal = await client.journal(run_id)
    second_llm = [r for r in journal if r.kind == RecordKind.LLM][1]
    fork = await client.fork(run_id, at=second_llm.seq + 1)
    forked = await transcript.read(store, fork.run_id)
    assert [c.kept for c in forked] == [transcript.Kept.YES] * 2
    assert _whole(forked) == _whole(await transcript.read(store, run_id))[:2]
    # The fork holds the parts its prefix names, not the later turns'.
    assert len(await store.conversation_parts(fork.run_id)) == 5

    report = await stead.prune(store, 1.0, now=store.clock.now() + 10)
    assert report.deleted == 1
    assert await store.conversation_parts(run_id) == {}
    assert len(await store.conversation_parts(fork.run_id)) == 5


def test_keep_conversation_is_a_bool() -> None:
    with pytest.raises(TypeError, match="keep_conversation"):
        stead.App("a", keep_conversation="no")  # type: ignore[arg-type]


def _agent_run(db_url: str, turns: int) -> str:
    async def go() -> str:
        store = await stead.open_store(db_url)
        try:
            return (await finished_agent(store, turns))[1]
        finally:
            await store.close()

    return asyncio.run(go())


def test_runs_show_prints_the_conversation_turn_by_turn(db_url: str) -> None:
    run_id = _agent_run(db_url, 2)
    shown = CliRunner().invoke(main, ["--db", db_url, "runs", "show", run_id,
                                      "--conversation"])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[0] == f"run {run_id}: 3 model call(s)"
    heads = [line for line in lines if line.startswith("── seq")]
    assert [h.split(" · ")[2] for h in heads] == [
        "2 message(s) sent", "4 message(s) sent, 2 as before", "6 message(s) sent, 4 as before"]
    assert "  parameters: {\"temperature\":0}" in lines
    assert sum(line.startswith("  parameters:") for line in lines) == 1  # printed when changed
    assert "  user: what is n?" in lines
    assert '  → calls lookup {"n":0}' in lines
    assert "  → answer: done" in lines
    assert sum(line.startswith("  system: You look things up.") for line in lines) == 1
    assert sum(line.startswith("  tool: ") for line in lines) == 2

    data = json.loads(CliRunner().invoke(main, ["--db", db_url, "runs", "show", run_id,
                                                "--conversation", "--json"]).output)
    assert [c["earlier"] for c in data] == [0, 2, 4]
    assert data[1]["new"][0]["role"] == "assistant"
    assert data[2]["answer"]["text"] == "done"


async def test_the_run_page_shows_what_each_turn_was_sent(store: stead.Store) -> None:
    app = stead.App("pages")
    model = stead.ScriptedModel(["first", "second"])

    @app.workflow(version=1)
    async def chat(run: stead.Run) -> str:
        w = await run.wait("approval", expires_in=3600)
        messages: list[Any] = [{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": f"<b>hi</b> {w.token._value}"}]
        said = await run.llm("answer", model, messages, temperature=0)
        messages += [{"role": "assistant", "content": said.text},
                     {"role": "user", "content": "and then?"}]
        return (await run.llm("answer", model, messages, temperature=0)).text

    client = stead.Client(store, app)
    info = await client.start(chat)
    await stead.Worker(app, store).run_until_idle()
    asgi = create_app(app, store=store, public=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://127.0.0.1:8484") as web:
        page = await web.get(f"/runs/{info.run_id}", params={"tab": "conversation"})
    assert page.status_code == 200
    html = page.text
    turns = re.findall(r'<article class="turn".*?</article>', html, re.S)
    assert len(turns) == 2
    roles = [re.findall(r'<span class="role">(\w+)</span>', t) for t in turns]
    assert roles == [["system", "user", "answer"], ["assistant", "user", "answer"]]
    assert "Sent 2 messages." in turns[0] and "Parameters: <code>{&#34;temperature&#34;:0}" \
        in turns[0]
    assert "Sent 4 messages: the first 2 as the turns before showed them." in turns[1]
    assert "Parameters" not in turns[1]  # as the turn before
    assert '<ol class="messages" start="3">' in turns[1]
    assert "&lt;b&gt;hi&lt;/b&gt; ****" in turns[0]  # escaped, the token masked
    assert "stk1." not in html and "<b>hi" not in html


@pytest.mark.parametrize("sealed", [True, False], ids=["encrypted", "clear"])
async def test_sealed_at_rest_readable_through_the_store_and_gone_when_forgotten(
        sqlite_url: str, sealed: bool) -> None:
    email = "alice@example.com"
    store = await stead.open_store(sqlite_url, payloads=sealed)
    try:
        app = stead.App("sealed")
        model = stead.ScriptedModel(["noted"])

        @app.workflow(version=1)
        async def ask(run: stead.Run) -> str:
            said = await run.llm("ask", model, [{"role": "user", "content": f"I am {email}"}],
                                 user=email)
            return said.text

        client = stead.Client(store, app)
        info = await client.start(ask, task_id="cust-1")
        await stead.Worker(app, store).run_until_idle()
        [call] = await transcript.read(store, info.run_id)
        assert call.new == ({"role": "user", "content": f"I am {email}"},)
        assert call.params == {"user": email}
        path = Path(sqlite_url.removeprefix("sqlite:///"))
        stored = b"".join(p.read_bytes() for p in path.parent.glob(f"{path.name}*")
                          if not p.name.endswith(".keys"))
        assert b"conversation_parts" in stored
        assert (email.encode() in stored) is not sealed

        await client.forget("cust-1", why="asked to be forgotten", by="dpo")
        assert await store.conversation_parts(info.run_id) == {}
        [gone] = await transcript.read(store, info.run_id)
        assert gone.kept == transcript.Kept.GONE
    finally:
        await store.close()


@pytest.mark.parametrize("provider", sdk_agents.PROVIDERS)
async def test_each_provider_adapter_keeps_what_its_sdk_sent_across_a_takeover(
        provider: str, fstore: stead.Store, clock: stead.FakeClock) -> None:
    rec = sdk_agents.Recorded(provider)
    app = stead.App("adapters")
    llm = sdk_agents.model(provider, rec.client())
    crashed: list[bool] = []

    def get_time(city: str) -> dict[str, Any]:
        if not crashed:  # the worker dies after the first tool's result is journaled
            crashed.append(True)
            raise Crash()
        return {"city": city, "time": "14:05"}

    @app.workflow(version=1)
    async def agent(run: stead.Run) -> str:
        saved = dict(sdk_agents.TOOLS)
        sdk_agents.TOOLS["get_time"] = get_time
        try:
            return await sdk_agents.agent(run, provider, llm)
        finally:
            sdk_agents.TOOLS.update(saved)

    client = stead.Client(fstore, app)
    info = await client.start(agent)
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id) == "It is 18 C and 14:05 in Paris."
    calls = await transcript.read(fstore, info.run_id)
    key = "input" if provider == "openai_responses" else "messages"
    # What the SDK put on the wire, turn by turn, over both workers.
    assert len(rec.requests) == len(calls) == 2
    assert _whole(calls) == [body[key] for body in rec.requests]
    for call, body in zip(calls, rec.requests, strict=True):
        sent = call.params["request"]
        assert sent["model"] == body["model"] and sent["tools"] == body["tools"]
    assert transcript.role(calls[1].new[0]) in ("assistant", "function_call")


@pytest.mark.filterwarnings("ignore:Items? .* the `ReadOnly` qualifier:UserWarning")
async def test_litellm_keeps_the_conversation_but_not_its_keys_or_mocks(
        fstore: stead.Store, clock: stead.FakeClock) -> None:
    from stead.llm import litellm as sl

    app = stead.App("litellm")
    model = stead.llm.LiteLLM("anthropic/claude-sonnet-4-6", api_key="sk-secret-1")
    crash_once = sdk_agents.crash_once()
    asked: dict[str, list[Any]] = {}
    weather = {"id": "call_1", "type": "function",
               "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}

    @app.workflow(version=1)
    async def agent(run: stead.Run) -> str:
        convo: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
        asked["turn-1"] = _plain(convo)
        first = await run.llm("turn-1", model, convo, mock_response="",
                              mock_tool_calls=[weather], api_key="sk-secret-2")
        convo.append(sl.assistant_message(first))
        for call in first.tool_calls:
            convo.append(sl.tool_message(call, await run.step(call.name, lambda: "18 C")))
        await run.step("boom", crash_once)  # the worker dies once the tool's result is durable
        asked["turn-2"] = _plain(convo)
        second = await run.llm("turn-2", model, convo, mock_response="It is 18 C in Paris.")
        return second.text

    client = stead.Client(fstore, app)
    info = await client.start(agent)
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id) == "It is 18 C in Paris."
    calls = await transcript.read(fstore, info.run_id)
    assert _whole(calls) == [asked["turn-1"], asked["turn-2"]]
    assert calls[0].params["request"] == {"model": "anthropic/claude-sonnet-4-6"}
    bodies = json.dumps([p.body for p in (await fstore.conversation_parts(info.run_id)).values()])
    assert "sk-secret" not in bodies and "mock" not in bodies


async def test_a_proposal_keeps_what_holds_now_as_the_model_saw_it(store: stead.Store) -> None:
    app = stead.App("proposals")
    model = stead.ScriptedModel(["refund it"])

    @app.workflow(version=1)
    async def plan(run: stead.Run) -> str:
        return (await run.propose("next", model, [{"role": "user", "content": "order 7?"}])).text

    client = stead.Client(store, app)
    info = await client.start(plan, intent=stead.Intent(goal="settle order 7"))
    await stead.Worker(app, store).run_until_idle()
    [call] = await transcript.read(store, info.run_id)
    assert list(call.new) == _plain(model.calls[0])
    assert call.new[-1]["content"].startswith("What holds now: ")
    assert "settle order 7" in call.new[-1]["content"]


async def test_a_message_longer_than_a_journaled_value_is_stored_as_its_size(
        tmp_path: Path) -> None:
    store = await stead.open_store(f"sqlite:///{tmp_path}/s.db")
    app = stead.App("big")
    model = stead.ScriptedModel(["read"])
    document = "z" * 5000

    @app.workflow(version=1)
    async def read(run: stead.Run) -> str:
        return (await run.llm("read", model, [{"role": "user", "content": document}])).text

    try:
        client = stead.Client(store, app)
        info = await client.start(read)
        await stead.Worker(app, store, stead.WorkerOptions(max_result_bytes=4096)
                           ).run_until_idle()
        assert await client.result(info.run_id) == "read"
        [call] = await transcript.read(store, info.run_id)
        assert call.new[0]["chars"] == len(json.dumps({"content": document, "role": "user"},
                                                      separators=(",", ":")))
        assert document not in json.dumps(call.new)
    finally:
        await store.close()


async def test_a_list_another_branch_grows_meanwhile_is_kept_as_it_was_sent(
        store: stead.Store) -> None:
    app = stead.App("branches")
    answering = asyncio.Event()

    class Slow:
        name = "slow"

        async def complete(self, messages: Sequence[Mapping[str, Any]], **params: Any
                           ) -> stead.Completion:
            answering.set()
            await asyncio.sleep(0.05)
            return stead.Completion(text="ok")

    @app.workflow(version=1)
    async def two(run: stead.Run) -> str:
        messages: list[Any] = [{"role": "user", "content": "first"}]

        async def grow() -> None:
            await answering.wait()
            messages.append({"role": "user", "content": "added meanwhile"})

        answer, _ = await asyncio.gather(run.llm("ask", Slow(), messages), grow())
        return answer.text

    client = stead.Client(store, app)
    info = await client.start(two)
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id) == "ok"
    [call] = await transcript.read(store, info.run_id)
    assert call.new == ({"role": "user", "content": "first"},)
