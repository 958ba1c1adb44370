"""`run.continue_as_new`: a loop that would grow its journal without bound
ends each run and goes on in a successor, on the same task, atomically.
(Crashes around the continuation, with real processes: test_crash_processes.py.)"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

import stead
from stead.records import LineageKind

app = stead.App("loops")
TURNS = 10_000
EVERY = 100


@app.workflow()
async def agent_loop(run: stead.Run, turn: int, total: int, score: float) -> dict[str, Any]:
    """A cheap agent loop: one recorded value a turn (a stand-in for a model
    call), carried on in a successor every EVERY turns."""
    while turn < total:
        score += run.random()
        turn += 1
        if turn % EVERY == 0 and turn < total:
            await run.continue_as_new(turn, total, score)
    return {"turns": turn, "score": score}


async def _chain(client: stead.Client, run_id: str) -> list[str]:
    """The run and its successors, in order."""
    chain = [run_id]
    while (after := (await client.lineage(chain[-1])).successor) is not None:
        chain.append(after)
    return chain


@pytest.mark.slow
async def test_a_10000_turn_loop_keeps_every_journal_bounded(store: stead.Store) -> None:
    client = stead.Client(store, app)
    first = await client.start(agent_loop, 0, TURNS, 0.0, task_id="agent-1")
    await stead.Worker(app, store).run_until_idle()

    chain = await _chain(client, first.run_id)
    assert len(chain) == TURNS // EVERY
    journals = [await client.journal(r) for r in chain]
    largest = max(len(j) for j in journals)
    assert largest == EVERY  # the journal never holds more than one stretch of turns
    assert sum(len(j) for j in journals) == TURNS
    last = await client.get(chain[-1])
    assert last.status == "completed" and last.result["turns"] == TURNS
    recorded = sum(json.loads(r.payload) for j in journals for r in j)
    assert last.result["score"] == pytest.approx(recorded)

    for parent, child in itertools.pairwise(chain):
        info = await client.get(parent)
        assert info.status == "completed" and info.result == {"continued_as": child}
        assert info.task_id == "agent-1" and (await client.get(child)).task_id == "agent-1"
        lineage = await client.lineage(child)
        assert lineage.parent is not None
        assert (lineage.parent.parent_id, lineage.parent.kind, lineage.parent.at_seq) == (
            parent, LineageKind.CONTINUED, EVERY)
        assert [c.run_id for c in (await client.lineage(parent)).children] == [child]
        assert json.loads((await store.get_run(child)).input)["args"][0] % EVERY == 0


async def test_a_successor_inherits_the_intent_with_what_is_left_of_its_budget(
    store: stead.Store,
) -> None:
    loops = stead.App("budgeted")
    model = stead.ScriptedModel(["a", "b", "c"])

    @loops.workflow()
    async def talk(run: stead.Run, turn: int) -> int:
        await run.llm("say", model, [{"role": "user", "content": str(turn)}])
        if turn == 0:
            await run.continue_as_new(1)
        return turn

    client = stead.Client(store, loops)
    intent = stead.Intent(goal="chat", budget=stead.Budget(model_calls=5, effects=2))
    first = await client.start(talk, 0, task_id="chat-1", intent=intent)
    await stead.Worker(loops, store).run_until_idle()
    [successor] = (await client.lineage(first.run_id)).children
    assert await client.result(successor.run_id, timeout=5) == 1
    [inherited] = await client.intents(successor.run_id)
    budget = stead.Intent.loads(inherited.intent).budget
    assert budget == stead.Budget(model_calls=4, effects=2)
    assert inherited.why == f"continued from run {first.run_id}"


async def test_arguments_that_do_not_fit_fail_the_run_and_start_nothing(
    store: stead.Store,
) -> None:
    loops = stead.App("typed")

    @loops.workflow()
    async def count(run: stead.Run, n: int) -> int:
        await run.continue_as_new("not a number")

    client = stead.Client(store, loops)
    info = await client.start(count, 1)
    await stead.Worker(loops, store).run_until_idle()
    failed = await client.get(info.run_id)
    assert failed.status == "failed" and failed.error["type"] == "InvalidInput"
    assert (await client.lineage(info.run_id)).children == ()
    assert len(await client.list_runs()) == 1
