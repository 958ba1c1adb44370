"""Starting many runs: `Client.start_many` (one transaction per batch, every
item checked before anything is written) and `stead start MODULE:APP -`
(JSON lines on stdin), on both stores."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from click.testing import CliRunner

import stead
from stead import starts
from stead.cli import main

app = stead.App("many")
app.queue("refunds", concurrency=2, priority=True)


@app.workflow()
async def greet(run: stead.Run, name: str) -> str:
    return await run.step("greet", lambda: f"hello {name}")


@app.workflow()
async def other(run: stead.Run) -> None:
    return None


def stored_runs(db_url: str) -> list[stead.records.RunRow]:
    async def read() -> list[stead.records.RunRow]:
        store = await stead.open_store(db_url)
        try:
            return await store.list_runs()
        finally:
            await store.close()

    return asyncio.run(read())


def cli(db_url: str, app_spec: str, stdin: str, *args: str) -> Any:
    return CliRunner().invoke(main, ["--db", db_url, "start", app_spec, "-", *args], input=stdin)


async def test_start_many_in_order_with_tasks_and_queues(store: stead.Store) -> None:
    client = stead.Client(store, app)
    before = await client.start(greet, "x", task_id="t-0")
    wanted = [stead.Start(greet, [f"n{i}"], task_id=f"t-{i % 4}",
                          queue="refunds" if i % 2 else None, priority=i if i % 2 else None)
              for i in range(10)]
    infos = await client.start_many(wanted, batch=3)
    assert len(infos) == 10
    # t-0 was live before; t-1..t-3 are owned by the first item that names them.
    assert [i.created for i in infos] == [False, True, True, True] + [False] * 6
    assert infos[0].run_id == infos[4].run_id == infos[8].run_id == before.run_id
    assert infos[5].run_id == infos[1].run_id
    assert (infos[1].queue, infos[1].priority) == ("refunds", 1)
    assert len(await store.list_runs()) == 4
    worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.02))
    await worker.run_until_idle()
    assert await client.result(infos[3].run_id) == "hello n3"


async def test_a_batch_keeps_its_order_in_a_queue(store: stead.Store) -> None:
    client = stead.Client(store, app)
    infos = await client.start_many([stead.Start("greet", [str(i)], queue="refunds")
                                     for i in range(50)])
    taken = []
    while got := await store.claim_queue(app.queues["refunds"], "w", app.hosted(), 30, 10):
        taken += [r.run_id for r in got]
        for r in got:
            await store.finish(stead.records.Fence(r.run_id, r.epoch, "w"),
                               stead.records.RunStatus.COMPLETED, result="null")
    assert taken == [i.run_id for i in infos]


@pytest.mark.parametrize(("bad", "says"), [
    (stead.Start(greet, [1]), "do not fit workflow greet@1"),
    (stead.Start("nope", []), "no workflow nope"),
    (stead.Start(greet, ["a"], queue="nowhere"), "declares no queue 'nowhere'"),
    (stead.Start(greet, ["a"], priority=3), "need a queue"),
    (stead.Start(greet, [object()]), "JSON"),
])
async def test_one_bad_item_starts_nothing(store: stead.Store, bad: stead.Start,
                                           says: str) -> None:
    client = stead.Client(store, app)
    good = [stead.Start(greet, [str(i)]) for i in range(5)]
    with pytest.raises(stead.InvalidStart, match=r"start #5: .*") as caught:
        await client.start_many([*good, bad, *good], batch=2)
    assert says in str(caught.value) and "nothing was started" in str(caught.value)
    assert await store.list_runs() == []


async def test_a_batch_that_conflicts_is_rolled_back_whole(store: stead.Store) -> None:
    client = stead.Client(store, app)
    owner = await client.start(other, task_id="order-1")
    batch = [stead.Start(greet, ["a"]), stead.Start(greet, ["b"], task_id="order-1")]
    with pytest.raises(stead.InvalidStart, match=r"already has a live run .* of workflow 'other'"):
        await client.start_many(batch)
    assert [r.run_id for r in await store.list_runs()] == [owner.run_id]


async def test_start_many_takes_only_starts(store: stead.Store) -> None:
    with pytest.raises(stead.InvalidStart, match=r"stead\.Start items, not dict"):
        await stead.Client(store, app).start_many([{"workflow": "greet"}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="batch"):
        await stead.Client(store, app).start_many([], batch=0)
    assert await stead.Client(store, app).start_many([]) == []


# -- JSON lines ------------------------------------------------------------------------
@pytest.mark.parametrize(("line", "says"), [
    ("not json", "line 2: Invalid JSON"),
    ('["greet"]', "line 2: Input should be an object"),
    ('{"args": []}', "line 2: workflow: Field required"),
    ('{"workflow": "greet", "args": "a"}', "line 2: args: Input should be a valid array"),
    ('{"workflow": "greet", "priority": "5", "queue": "q"}', "line 2: priority: Input should be"),
    ('{"workflow": "greet", "tsk_id": "t"}', "line 2: tsk_id: Extra inputs are not permitted"),
    ('{"workflow": "greet", "version": 0}', "line 2: version: Input should be greater"),
    ('{"workflow": "greet", "intent": {"goal": 1, "nope": 2}}', "line 2: intent:"),
])
def test_bad_lines_are_named(line: str, says: str) -> None:
    with pytest.raises(stead.InvalidStart) as caught:
        starts.from_lines(['{"workflow": "greet"}', line])
    assert says in str(caught.value), caught.value
    assert str(caught.value).endswith("nothing was started")


def test_lines_become_starts() -> None:
    found = starts.from_lines([
        '{"workflow": "greet", "args": ["a"], "task_id": "t", "queue": "refunds", '
        '"priority": 5, "dedup_key": "d", "kwargs": {}, "version": 1}', "", "  ",
        '{"workflow": "other"}',
    ])
    assert found == [
        stead.Start("greet", ["a"], {}, task_id="t", version=1, queue="refunds", priority=5,
                    dedup_key="d", where="line 1"),
        stead.Start("other", [], {}, where="line 4"),
    ]


@pytest.fixture
def many_spec(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "many_app_cli.py").write_text(
        "from tests.test_start_many import app\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "many_app_cli:app"


def test_stead_start_reads_json_lines(db_url: str, many_spec: str) -> None:
    lines = "\n".join(json.dumps(x) for x in [
        {"workflow": "greet", "args": ["a"], "task_id": "t-a", "queue": "refunds",
         "priority": 2},
        {"workflow": "greet", "args": ["b"]},
        {"workflow": "greet", "args": ["a again"], "task_id": "t-a"},
    ]) + "\n"
    result = cli(db_url, many_spec, lines, "--batch", "2")
    assert result.exit_code == 0, result.output
    out = [json.loads(line) for line in result.output.splitlines()]
    assert [o["created"] for o in out] == [True, True, False]
    assert out[0]["run_id"] == out[2]["run_id"] and out[0]["task_id"] == "t-a"
    runs = {r.run_id: r for r in stored_runs(db_url)}
    assert len(runs) == 2
    assert (runs[out[0]["run_id"]].queue, runs[out[0]["run_id"]].priority) == ("refunds", 2)
    shown = CliRunner().invoke(main, ["--db", db_url, "runs", "show", out[0]["run_id"]])
    assert "queue     refunds (priority 2)" in shown.output, shown.output


@pytest.mark.parametrize(("lines", "says"), [
    ('{"workflow": "greet", "args": ["a"]}\n{"workflow": "greet", "args": [1]}\n',
     "line 2: these arguments do not fit workflow greet@1"),
    ('{"workflow": "greet", "args": ["a"]}\n{"workflow": "greet", "args": ["b"]\n',
     "line 2: Invalid JSON"),
    ('{"workflow": "greet", "args": ["a"], "queue": "nope"}\n', "line 1: app 'many'"),
])
def test_stead_start_refuses_a_bad_line_and_starts_nothing(
        db_url: str, many_spec: str, lines: str, says: str) -> None:
    result = cli(db_url, many_spec, lines)
    assert result.exit_code == 1
    assert says in result.output and "nothing was started" in result.output, result.output
    assert stored_runs(db_url) == []


def test_stead_start_dash_takes_no_run_options(db_url: str, many_spec: str) -> None:
    result = cli(db_url, many_spec, '{"workflow": "greet", "args": ["a"]}\n', "--queue", "refunds")
    assert result.exit_code == 1 and "each line says what --queue would" in result.output
    assert stored_runs(db_url) == []


async def test_a_deadline_given_in_a_batch_or_a_json_line_is_kept(store: stead.Store) -> None:
    client = stead.Client(store, app)
    now = store.clock.now()
    timed, plain = await client.start_many([stead.Start(greet, ["a"], deadline=60.0),
                                            stead.Start(greet, ["b"])])
    assert timed.deadline is not None and 59 < timed.deadline - now <= 61
    assert plain.deadline is None
    with pytest.raises(stead.InvalidStart, match="deadline"):
        await client.start_many([stead.Start(greet, ["c"], deadline=-1.0)])
    line = json.dumps({"workflow": "greet", "args": ["d"], "deadline": 30})
    assert starts.from_line(line, "line 1").deadline == 30
    with pytest.raises(stead.InvalidStart, match="deadline"):
        starts.from_line(json.dumps({"workflow": "greet", "deadline": 0}), "line 1")
