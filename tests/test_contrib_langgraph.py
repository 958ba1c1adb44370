"""stead.contrib.langgraph, in process: a graph's nodes and a program's tasks
as journaled steps, `interrupt()` as a bound, single-use stead wait, an effect
node sent at most once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, TypedDict

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, RetryPolicy, Send, interrupt

import stead
from stead.cli import main
from stead.contrib import langgraph as lg
from stead.contrib.langgraph import _values
from tests import stress
from tests.workers import agents_app, langgraph_app

pytestmark = pytest.mark.usefixtures("sdk_dir")


def _names(journal: list[stead.Record]) -> list[str]:
    return [r.name for r in journal if r.status != stead.records.RecordStatus.STARTED]


async def _waiting(client: stead.Client, run_id: str,
                   app: stead.App = langgraph_app.app) -> stead.WaitInfo:
    await stead.Worker(app, client.store).run_until_idle()
    assert (await client.get(run_id)).status == "waiting"  # suspended: no worker held
    [w] = await client.waits(run_id=run_id)
    return w


async def test_nodes_are_journaled_and_an_interrupt_is_a_bound_single_use_wait(
    store: stead.Store, sdk_dir: Path,
) -> None:
    client = stead.Client(store, langgraph_app.app)
    info = await client.start(langgraph_app.refund_order, "123")
    w = await _waiting(client, info.run_id)
    assert w.kind == lg.INTERRUPT
    assert json.loads(w.bind)["node"] == "review"
    # lookup and history ran side by side, each once
    ran = agents_app.lines("nodes.log")
    assert sorted(ran) == ["history", "lookup", "lookup started", "plan", "review"]
    names = _names(await store.load_journal(info.run_id))
    assert names[0] == "node plan" and names[3] == "node review"
    assert sorted(names[1:3]) == ["node history", "node lookup"]
    asked = json.loads((sdk_dir / "interrupt.json").read_text())
    assert asked["node"] == "review"
    assert asked["value"] == {"question": "refund?",
                              "facts": ["no refund before", "order 123", "paid 4200"]}

    bind = json.loads(w.bind)
    wrong = await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e0",
                                 token=asked["token"], payload={"approved": True},
                                 bind={**bind, "node": "refund"})
    assert isinstance(wrong, stead.Rejected)
    ok = await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1",
                              token=asked["token"], payload={"approved": True}, bind=bind)
    assert isinstance(ok, stead.Accepted)
    again = await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1",
                                 token=asked["token"], payload={"approved": True}, bind=bind)
    assert isinstance(again, stead.Duplicate)
    await stead.Worker(langgraph_app.app, store).run_until_idle()
    result = await client.result(info.run_id, timeout=5)
    assert result["receipt"] == "refunded 4200 on order 123"
    assert result["decision"] == {"approved": True}  # the event's payload, as resume value
    # the answered node ran again from its start (LangGraph's rule), nothing else did
    assert agents_app.lines("nodes.log")[5:] == ["review", "reviewed"]
    [sent] = agents_app.lines("ledger.log")
    [intent] = [r for r in await store.load_journal(info.run_id)
                if r.name == "node refund" and r.status == "intent"]
    assert sent.split()[-1] == json.loads(intent.payload)["key"]  # op.key, journaled first


async def test_a_refusal_ends_the_graph_without_the_effect(store: stead.Store) -> None:
    client = stead.Client(store, langgraph_app.app)
    info = await client.start(langgraph_app.refund_order, "7", False)
    w = await _waiting(client, info.run_id)
    assert w.token_hash is None  # no one to hand a token to: whoever reaches the database
    assert w.request is not None and json.loads(w.request) == {  # what the person is asked
        "node": "review",
        "value": {"question": "refund?", "facts": ["no refund before", "order 7", "paid 4200"]}}
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1",
                         payload={"approved": False}, bind=json.loads(w.bind))
    await stead.Worker(langgraph_app.app, store).run_until_idle()
    result = await client.result(info.run_id, timeout=5)
    assert result["receipt"] is None and result["decision"] == {"approved": False}
    assert agents_app.lines("ledger.log") == []


async def test_functional_tasks_are_journaled_and_reused(store: stead.Store) -> None:
    client = stead.Client(store, langgraph_app.app)
    info = await client.start(langgraph_app.forecasts, ["Paris", "Oslo"])
    w = await _waiting(client, info.run_id)
    assert agents_app.lines("nodes.log") == ["fetch Paris", "fetch Oslo", "summarize"]
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1",
                         payload={"publish": True}, bind=json.loads(w.bind))
    await stead.Worker(langgraph_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == {
        "summary": "Paris: rain / Oslo: rain", "answer": {"publish": True}}
    # the entrypoint ran again from its input; its recorded tasks were not
    assert agents_app.lines("nodes.log") == ["fetch Paris", "fetch Oslo", "summarize",
                                             "summarize"]
    names = _names(await store.load_journal(info.run_id))
    assert names.count("task fetch") == 2 and names.count("task summarize") == 2


class _S(TypedDict):
    n: int


def _one_node(**compile_options: Any) -> Any:
    builder = StateGraph(_S)
    builder.add_node("bump", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "bump")
    builder.add_edge("bump", END)
    return builder.compile(**compile_options)


def _running(graph: Any) -> tuple[stead.App, Any]:
    """An app whose one workflow runs `graph` from `{"n": 1}`."""
    app = stead.App("lg-graph")

    @app.workflow(version=1)
    async def flow(run: stead.Run) -> Any:
        return await lg.run(run, graph, {"n": 1})

    return app, flow


async def test_a_graph_with_its_own_checkpointer_is_refused(store: stead.Store) -> None:
    app, flow = _running(_one_node(checkpointer=InMemorySaver()))

    client = stead.Client(store, app)
    info = await client.start(flow)
    await stead.Worker(app, store).run_until_idle()
    failed = await client.get(info.run_id)
    assert failed.status == "failed" and "without a checkpointer" in str(failed.error)


async def test_outside_a_stead_run_tasks_are_langgraph_tasks_and_effects_refuse() -> None:
    program = langgraph_app.forecast.copy({"checkpointer": InMemorySaver()})
    out = await program.ainvoke(["Rome"], {"configurable": {"thread_id": "t"}})
    [asked] = out["__interrupt__"]  # LangGraph's own interrupt, no stead wait
    assert asked.value == {"publish": "Rome: rain"}
    assert agents_app.lines("nodes.log") == ["fetch Rome", "summarize"]

    builder = StateGraph(_S)
    builder.add_node("send", lg.effect(lambda op, s: {"n": 0}))
    builder.add_edge(START, "send")
    with pytest.raises(stead.SteadError, match="acts only in a stead run"):
        await builder.compile().ainvoke({"n": 1})


async def test_a_retry_policy_calls_a_failed_node_again_each_call_journaled(
    store: stead.Store,
) -> None:
    def flaky(state: _S) -> _S:
        tries = agents_app.lines("nodes.log")
        agents_app.log("nodes.log", "flaky")
        if len(tries) < 2:
            raise ConnectionError("the service hung up")
        return {"n": state["n"] + 1}

    def ask(state: _S) -> _S:
        return {"n": state["n"] + int(interrupt("more?")["more"])}

    builder = StateGraph(_S)
    builder.add_node("flaky", flaky, retry_policy=RetryPolicy(max_attempts=3,
                                                              initial_interval=0.01))
    builder.add_node("ask", ask)
    builder.add_edge(START, "flaky")
    builder.add_edge("flaky", "ask")
    app, flow = _running(builder.compile())

    client = stead.Client(store, app)
    info = await client.start(flow)
    await stead.Worker(app, store).run_until_idle()
    [w] = await client.waits(run_id=info.run_id)
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1", payload={"more": 5},
                         bind=json.loads(w.bind))
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == {"n": 7}
    assert agents_app.lines("nodes.log") == ["flaky"] * 3  # the replay ran none again
    flaky_calls = [r.status for r in await store.load_journal(info.run_id)
                   if r.name == "node flaky" and r.status != "started"]
    assert flaky_calls == ["error", "error", "ok"]


async def test_a_node_asking_twice_gets_each_answer_in_order(store: stead.Store) -> None:
    """Each answer is a wake-up, and each wake-up replays the graph: the node's
    first interrupt is raised again from the journal and takes its answer."""
    def ask_twice(state: _S) -> _S:
        first = interrupt("first?")["n"]
        second = interrupt("second?")["n"]
        agents_app.log("nodes.log", f"answered {first} {second}")
        return {"n": state["n"] * 100 + first * 10 + second}

    builder = StateGraph(_S)
    builder.add_node("ask", ask_twice)
    builder.add_edge(START, "ask")
    app, flow = _running(builder.compile())

    client = stead.Client(store, app)
    info = await client.start(flow)
    for n, question in ((2, "first?"), (3, "second?")):
        await stead.Worker(app, store).run_until_idle()
        [w] = [w for w in await client.waits(run_id=info.run_id) if w.state == "open"]
        assert json.loads(w.bind)["pass"] == n - 2
        assert isinstance(await client.deliver(info.run_id, wait_id=w.wait_id,
                                               event_id=question, payload={"n": n},
                                               bind=json.loads(w.bind)), stead.Accepted)
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == {"n": 123}
    assert agents_app.lines("nodes.log") == ["answered 2 3"]


async def test_a_messages_graph_replays_though_its_messages_get_new_ids(
    store: stead.Store,
) -> None:
    """`add_messages` gives each message without an id a random one, on every
    run of the graph: a replay's node inputs differ from the live ones only
    there, and that is not a change of what the node was asked."""
    def model(state: MessagesState) -> dict[str, Any]:
        agents_app.log("nodes.log", "model")
        return {"messages": [AIMessage("Refund order 123?")]}

    def confirm(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"confirmed: {interrupt('ok?')['approved']}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("confirm", confirm)
    builder.add_edge(START, "model")
    builder.add_edge("model", "confirm")
    graph = builder.compile()
    app = stead.App("lg-messages")

    @app.workflow(version=1)
    async def flow(run: stead.Run) -> list[str]:
        out = await lg.run(run, graph, {"messages": [{"role": "user", "content": "hi"}]})
        return [str(m.content) for m in out["messages"]]

    client = stead.Client(store, app)
    info = await client.start(flow)
    w = await _waiting(client, info.run_id, app)
    await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1",
                         payload={"approved": True}, bind=json.loads(w.bind))
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == [
        "hi", "Refund order 123?", "confirmed: True"]
    assert agents_app.lines("nodes.log") == ["model"]  # replayed, not asked again


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=5).filter(lambda k: k != "lc"), inner, max_size=3),
    max_leaves=10)
messages = st.builds(lambda text, ai: AIMessage(text) if ai else HumanMessage(text),
                     st.text(max_size=10), st.booleans())


# Generating LangChain messages is slow, the more so on a busy machine: a
# health check about it would fail the test for the machine's sake.
@settings(max_examples=stress.examples(100), suppress_health_check=[HealthCheck.too_slow])
@given(update=st.dictionaries(st.text(max_size=5), json_values | st.lists(messages,
                                                                           max_size=3),
                              max_size=4))
def test_a_node_update_comes_back_from_its_json_as_it_was(update: dict[str, Any]) -> None:
    data = _values.encode(update, "node 'n'")
    assert _values.decode(json.loads(json.dumps(data))) == update


@pytest.mark.parametrize("update", [
    {"lc": [HumanMessage("hi")]},  # LangChain's own escape leaves the message an object
    {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "AIMessage"],
     "kwargs": {"content": "not a message: the graph's own dict"}},
    {"__lc_escaped__": {"lc": [AIMessage("x")]}},
])
def test_a_dict_with_langchains_own_keys_comes_back_as_it_was(update: dict[str, Any]) -> None:
    data = _values.encode(update, "node 'n'")
    assert _values.decode(json.loads(json.dumps(data))) == update


def test_a_command_comes_back_with_its_update_and_where_it_goes() -> None:
    command = Command(update={"n": 1}, goto=["a", Send("b", {"x": [1]})])
    back = _values.decode(json.loads(json.dumps(_values.encode(command, "node 'n'"))))
    assert back.update == {"n": 1} and back.goto == ["a", Send("b", {"x": [1]})]


def test_an_update_is_journaled_as_a_person_writes_it() -> None:
    """What `stead reconcile --happened` and a check's `Outcome.done` give."""
    assert _values.encode({"receipt": "rf_1"}, "node 'n'") == {"receipt": "rf_1"}
    assert _values.decode({"receipt": "rf_1", "n": [1]}) == {"receipt": "rf_1", "n": [1]}


def test_an_update_with_no_json_form_is_refused_when_it_is_made() -> None:
    with pytest.raises(stead.SteadError, match="no JSON form"):
        _values.encode({"n": object()}, "node 'n'")


# -- an effect node whose outcome is lost -------------------------------------------------
class _Refund(TypedDict, total=False):
    order_id: str
    receipt: str


def _send_and_lose_the_answer(op: stead.Operation, state: _Refund) -> _Refund:
    """The refund goes out; the service's answer never comes back."""
    agents_app.log("ledger.log", f"{state['order_id']} {op.key}")
    raise stead.OutcomeUncertain("the payment service hung up after taking the refund")


def _find_refund(op: stead.Operation) -> stead.Outcome:
    """What the payment service says of the key: the node's update, as `fn` returns it."""
    sent = [line.split()[0] for line in agents_app.lines("ledger.log")
            if line.endswith(op.key)]
    if not sent:
        return stead.Outcome.not_found()
    return stead.Outcome.done({"receipt": f"rf-{sent[0]}"})


def _refunding(**options: Any) -> tuple[stead.App, Any]:
    builder = StateGraph(_Refund)
    builder.add_node("refund", lg.effect(_send_and_lose_the_answer, **options))
    builder.add_edge(START, "refund")
    builder.add_edge("refund", END)
    graph = builder.compile()
    app = stead.App("lg-refunds")

    @app.workflow(version=1)
    async def refund(run: stead.Run, order_id: str) -> Any:
        return await lg.run(run, graph, {"order_id": order_id})

    return app, refund


@pytest.mark.usefixtures("sdk_dir")
async def test_an_effect_nodes_check_answers_with_the_nodes_update(
    store: stead.Store,
) -> None:
    app, refund = _refunding(check=_find_refund)
    client = stead.Client(store, app)
    info = await client.start(refund, "123")
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == {"order_id": "123",
                                                           "receipt": "rf-123"}
    assert len(agents_app.lines("ledger.log")) == 1  # asked, not sent again


@pytest.mark.usefixtures("sdk_dir")
async def test_an_effect_node_reconciled_from_the_command_line_goes_on_with_that_update(
    db_url: str,
) -> None:
    app, refund = _refunding()
    store = await stead.open_store(db_url)
    try:
        client = stead.Client(store, app)
        info = await client.start(refund, "123")
        await stead.Worker(app, store).run_until_idle()
        assert (await client.get(info.run_id)).status == "outcome_unknown"
        done = await asyncio.to_thread(CliRunner().invoke, main, [
            "--db", db_url, "reconcile", info.run_id, "node refund",
            "--happened", '{"receipt": "rf-seen-at-the-bank"}', "--by", "ops"])
        assert done.exit_code == 0, done.output
        await stead.Worker(app, store).run_until_idle()
        assert await client.result(info.run_id, timeout=5) == {
            "order_id": "123", "receipt": "rf-seen-at-the-bank"}
        assert len(agents_app.lines("ledger.log")) == 1
    finally:
        await store.close()


def _find_refund_as_text(op: stead.Operation) -> stead.Outcome:
    """A check that answers with the service's receipt id, not the node's update,
    until it is fixed (the file `fixed` appears)."""
    if (agents_app.folder() / "fixed").exists():
        return _find_refund(op)
    return stead.Outcome.done("rf-123")


@pytest.mark.usefixtures("sdk_dir")
async def test_a_check_answering_in_another_shape_records_nothing_and_stops_the_run(
    store: stead.Store,
) -> None:
    app, refund = _refunding(check=_find_refund_as_text)
    client = stead.Client(store, app)
    info = await client.start(refund, "123")
    await stead.Worker(app, store).run_until_idle()
    stopped = await client.get(info.run_id)
    assert stopped.status == "outcome_unknown"
    assert stopped.error is not None and stopped.error["type"] == "InvalidCheckResult"
    assert "answered Outcome.done(str): a node's check answers with the node's update" \
        in stopped.error["message"]
    assert "stead runs retry RUN" in stopped.error["message"]
    assert [r.status for r in await store.load_journal(info.run_id)
            if r.name == "node refund"] == ["intent", "unknown"]  # no outcome recorded
    (agents_app.folder() / "fixed").touch()
    await client.retry(info.run_id)
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == {"order_id": "123",
                                                           "receipt": "rf-123"}
    assert len(agents_app.lines("ledger.log")) == 1


def _send_refund(op: stead.Operation, state: _Refund) -> _Refund:
    agents_app.log("ledger.log", f"{state['order_id']} {op.key}")
    return {"receipt": f"rf-{state['order_id']}"}


def _refund_graph() -> Any:
    builder = StateGraph(_Refund)
    builder.add_node("refund", lg.effect(_send_refund))
    builder.add_edge(START, "refund")
    builder.add_edge("refund", END)
    return builder.compile()


def _deploy(*, fixed: bool) -> stead.App:
    """The same workflow, before and after its bug (reading the graph's output
    as the journal's wrapper) was fixed."""
    app = stead.App("lg-rescue")
    graph = _refund_graph()

    @app.workflow(name="refund", version=1)
    async def refund(run: stead.Run, order_id: str) -> Any:
        out = await lg.run(run, graph, {"order_id": order_id})
        return out["receipt"] if fixed else out["value"]

    return app


@pytest.mark.usefixtures("sdk_dir")
async def test_a_run_failed_after_its_effect_went_out_goes_on_as_a_fork_sending_nothing_again(
    db_url: str,
) -> None:
    store = await stead.open_store(db_url)
    try:
        broken = _deploy(fixed=False)
        client = stead.Client(store, broken)
        info = await client.start("refund", "123", version=1)
        await stead.Worker(broken, store).run_until_idle()
        failed = await client.get(info.run_id)
        assert failed.status == "failed" and failed.error is not None
        assert failed.error["type"] == "KeyError"
        assert len(agents_app.lines("ledger.log")) == 1  # the refund went out
        with pytest.raises(stead.NotStopped, match=f"stead runs fork {info.run_id}"):
            await client.retry(info.run_id)

        def cli(*args: str) -> Any:
            return CliRunner().invoke(main, ["--db", db_url, *args])

        shown = await asyncio.to_thread(cli, "runs", "show", info.run_id)
        assert f"`stead runs fork {info.run_id}` goes on from its journal" in shown.output
        fixed = _deploy(fixed=True)
        forked = await asyncio.to_thread(cli, "runs", "fork", info.run_id, "--json")
        assert forked.exit_code == 0, forked.output
        fork = json.loads(forked.output)
        assert fork["at"] == len(await store.load_journal(info.run_id))
        await stead.Worker(fixed, store).run_until_idle()
        assert await client.result(fork["run_id"], timeout=5) == "rf-123"
        assert len(agents_app.lines("ledger.log")) == 1  # replayed, not sent again
    finally:
        await store.close()
