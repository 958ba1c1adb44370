"""Child runs: started once, awaited durably (the parent holds no lease),
their outcome journaled in the parent; fan-out with gather; a failed child
raises `ChildFailed`; cancelling a parent cancels its children. On both
stores. The SIGKILL between journaling and starting is in
test_crash_processes.py."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

import pytest

import stead
from stead.records import Fence, NewRun, Record
from stead.workflow.children import child_id
from tests import pg, stress
from tests.helpers import Calls


def _family(calls: Calls) -> tuple[stead.App, Any, Any]:
    app = stead.App("t")

    @app.workflow()
    async def leaf(run: stead.Run, i: int) -> int:
        def square(v: int) -> int:
            calls.hit(f"leaf{v}")
            return v * v

        return await run.step("square", square, i)

    @app.workflow()
    async def parent(run: stead.Run, n: int) -> list[int]:
        results = await asyncio.gather(*(run.child(leaf, i, task_id=f"leaf-{i}")
                                         for i in range(n)))
        return list(results)

    return app, leaf, parent


def _waiting() -> tuple[stead.App, Any]:
    """An app with a workflow that waits for one event of kind "go"."""
    app = stead.App("t")

    @app.workflow()
    async def waits(run: stead.Run) -> Any:
        return await (await run.wait("go", token=False))

    return app, waits


async def test_a_parent_fans_out_and_reads_each_child_result_once(store: stead.Store) -> None:
    calls = Calls()
    app, _leaf, parent = _family(calls)
    client = stead.Client(store, app)
    info = await client.start(parent, 3)
    await stead.Worker(app, store).run_until_idle()

    assert await client.result(info.run_id, timeout=5) == [0, 1, 4]
    assert calls == {"leaf0": 1, "leaf1": 1, "leaf2": 1}
    kids = await client.children(info.run_id)
    assert sorted(k.task_id or "" for k in kids) == ["leaf-0", "leaf-1", "leaf-2"]
    assert {k.run_id for k in kids} == {r.run_id for r in await client.list_runs(
        workflow="leaf") if r.parent_id == info.run_id}
    assert all(k.status == "completed" and k.parent_id == info.run_id for k in kids)
    assert sorted(k.input["args"][0] for k in kids) == [0, 1, 2]
    assert (await client.get(info.run_id)).input == {"args": [3], "kwargs": {}, "names": ["n"]}
    assert len(await client.children(info.run_id, limit=2)) == 2
    assert await client.children(kids[0].run_id) == []
    with pytest.raises(stead.UnknownRun):
        await client.children("no-such-run")
    journal = await client.journal(info.run_id)
    opened = [r for r in journal if r.kind == "child" and r.status == "open"]
    done = [r for r in journal if r.kind == "child" and r.status == "ok"]
    assert len(opened) == len(done) == 3
    assert {json.loads(r.payload)["run_id"] for r in opened} == {k.run_id for k in kids}
    # The parent suspended while its children ran: it was woken, then replayed.
    assert len(await client.resumes(info.run_id)) >= 1


async def test_a_replayed_parent_starts_no_second_child(store: stead.Store) -> None:
    calls = Calls()
    app, _leaf, parent = _family(calls)
    client = stead.Client(store, app)
    info = await client.start(parent, 2)
    for _ in range(3):  # takeovers of the parent (each claim replays it)
        await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == [0, 1]
    assert len(await client.list_runs(workflow="leaf")) == 2
    assert sum(calls.values()) == 2


async def test_a_failed_child_raises_a_typed_error_in_the_parent(store: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def broken(run: stead.Run) -> int:
        raise ValueError("no such order")

    @app.workflow()
    async def parent(run: stead.Run) -> dict[str, str]:
        try:
            await run.child(broken)
        except stead.ChildFailed as exc:
            return {"status": exc.status, "type": exc.error_type, "message": exc.message}
        return {}

    client = stead.Client(store, app)
    info = await client.start(parent)
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == {
        "status": "failed", "type": "ValueError", "message": "no such order"}


async def test_a_child_of_a_task_held_by_another_run_fails_in_the_parent(
    store: stead.Store,
) -> None:
    app, waits = _waiting()

    @app.workflow()
    async def parent(run: stead.Run) -> str:
        try:
            await run.child(waits, task_id="shared")
        except stead.ChildFailed as exc:
            return exc.error_type
        return "adopted"

    client = stead.Client(store, app)
    await client.start(waits, task_id="shared")
    info = await client.start(parent)
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "TaskTaken"


async def test_cancelling_a_parent_cancels_its_children(store: stead.Store) -> None:
    app, waits = _waiting()

    @app.workflow()
    async def middle(run: stead.Run) -> Any:
        return await run.child(waits)

    @app.workflow()
    async def parent(run: stead.Run) -> Any:
        return await asyncio.gather(run.child(middle), run.child(waits))

    client = stead.Client(store, app)
    info = await client.start(parent)
    await stead.Worker(app, store).run_until_idle()
    everyone = await client.list_runs()
    assert len(everyone) == 4 and {r.status for r in everyone} == {"waiting"}
    await client.cancel(info.run_id)
    assert {r.status for r in await client.list_runs()} == {"cancelled"}
    assert await client.waits() == []  # their waits closed with them


async def test_a_child_is_awaited_across_a_worker_that_holds_nothing(
    store: stead.Store,
) -> None:
    """While its child waits for an event, the parent is suspended too: no
    lease, no worker. The child's end wakes it."""
    app, waits = _waiting()

    @app.workflow()
    async def parent(run: stead.Run) -> Any:
        return {"child said": await run.child(waits)}

    client = stead.Client(store, app)
    info = await client.start(parent)
    await stead.Worker(app, store).run_until_idle()
    row = await client.get(info.run_id)
    assert (row.status, row.lease_owner) == ("waiting", None)
    [kid] = [r for r in await client.list_runs(workflow="waits")]
    assert isinstance(await client.deliver(kid.run_id, kind="go", event_id="e1", payload=7),
                      stead.Accepted)
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == {"child said": 7}


async def test_run_child_refuses_what_is_not_a_workflow(store: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def parent(run: stead.Run) -> Any:
        return await run.child("leaf")  # type: ignore[arg-type]

    client = stead.Client(store, app)
    info = await client.start(parent)
    await stead.Worker(app, store).run_until_idle()
    with pytest.raises(stead.RunFailed, match="registered workflow"):
        await client.result(info.run_id, timeout=5)


async def test_arguments_that_do_not_fit_the_child_fail_in_the_parent(
    store: stead.Store,
) -> None:
    calls = Calls()
    app, leaf, _parent = _family(calls)

    @app.workflow()
    async def careless(run: stead.Run) -> Any:
        return await run.child(leaf, 1, 2, 3)

    client = stead.Client(store, app)
    info = await client.start(careless)
    await stead.Worker(app, store).run_until_idle()
    with pytest.raises(stead.RunFailed, match="do not fit child workflow leaf@1"):
        await client.result(info.run_id, timeout=5)
    assert await client.list_runs(workflow="leaf") == []


async def test_runs_show_names_a_childs_parent(store: stead.Store) -> None:
    from stead.views import runs_view, timeline

    calls = Calls()
    app, _leaf, parent = _family(calls)
    client = stead.Client(store, app)
    info = await client.start(parent, 1)
    await stead.Worker(app, store).run_until_idle()
    [kid] = await client.list_runs(workflow="leaf")
    shown = timeline.render_run(kid, await client.journal(kid.run_id), [])
    assert f"parent    {info.run_id} (this run is its child)" in shown
    assert runs_view.run_json(kid)["parent_id"] == info.run_id


@pytest.mark.parametrize("fault", ["lose_ack", "drop_commit"])
async def test_a_child_start_whose_commit_is_in_doubt_is_made_once(
    pg_url: str, proxy: pg.Proxy, fault: str,
) -> None:
    """PostgreSQL: the commit that creates the child and journals it is lost
    on its way back (it landed: the read-back says so) or on its way there
    (it did not: the write is made again). Either way, one child, one record."""
    store = await stead.open_store(proxy.url(pg_url))
    reader = await stead.open_store(pg_url)
    try:
        await store.create_run(NewRun("p1", "parent", 1, None, '{"args":[],"kwargs":{}}'))
        [row] = await store.claim("w1", ["parent@1"], 30, 1)
        fence = Fence("p1", row.epoch, "w1")
        opening = Record(seq=0, addr="0", attempt=1, kind="child", name="leaf", digest="d",
                         status="open", payload="{}", epoch=row.epoch, at=0.0)
        new = NewRun(child_id("p1", "0"), "leaf", 1, None, '{"args":[1],"kwargs":{}}',
                     parent_id="p1")
        if fault == "lose_ack":
            proxy.acks_to_lose = 1
        else:
            proxy.commits_to_drop = 1
        kid, written = await store.start_child(fence, [opening], None, new)
        assert (proxy.lost_acks, proxy.dropped_commits) == (
            (1, 0) if fault == "lose_ack" else (0, 1))
        assert (kid.run_id, kid.parent_id) == (new.run_id, "p1")
        assert json.loads(written.payload) == {"run_id": new.run_id}
        assert [r.run_id for r in await reader.list_runs(workflow="leaf")] == [new.run_id]
        assert [(r.kind, r.status) for r in await reader.load_journal("p1")] == [
            ("child", "open")]
    finally:
        await store.close()
        await reader.close()


async def test_no_wake_is_lost_between_a_suspending_parent_and_its_ending_children(
    db_url: str,
) -> None:
    """Many parents, each suspending as its quick children end, on three
    workers with stores of their own: every parent is woken and completes
    (a lost wake would leave one waiting for ever)."""
    calls = Calls()
    app, leaf, _parent = _family(calls)

    @app.workflow()
    async def fan(run: stead.Run, n: int) -> list[int]:
        return list(await asyncio.gather(*(run.child(leaf, i) for i in range(n))))

    stores = [await stead.open_store(db_url) for _ in range(3)]
    try:
        client = stead.Client(stores[0], app)
        runs = [(await client.start(fan, 3)).run_id for _ in range(15)]
        options = stead.WorkerOptions(concurrency=8, poll_interval=0.05)
        done = await asyncio.gather(*(stead.Worker(app, s, options).run_until_done(
            runs, timeout=60) for s in stores))
        assert all(done)
        assert [await client.result(r, timeout=5) for r in runs] == [[0, 1, 4]] * 15
        assert sum(calls.values()) == 45
    finally:
        for s in stores:
            await s.close()


@pytest.mark.parametrize("calls_after", [0, 1])
async def test_a_child_asked_to_cancel_during_its_last_call_completes(
    store: stead.Store, caplog: pytest.LogCaptureFixture, calls_after: int,
) -> None:
    """A cancel stops a running run at its next call boundary. A child asked to
    cancel while its last call runs has none left: the call's result is journaled,
    the child returns and ends `completed` (its `cancel_requested` still set), and the
    parent gets its result. With one more call after it, the child stops there, as
    `cancelled`, and the parent gets `ChildFailed`. (docs/concepts/children.md)"""
    app = stead.App("t")
    started, release = threading.Event(), threading.Event()
    deadline = 30 * stress.slow()

    def last() -> str:
        started.set()
        release.wait(deadline)
        return "made"

    @app.workflow()
    async def kid(run: stead.Run) -> str:
        made = await run.step("last", last)
        for n in range(calls_after):
            await run.step(f"after {n}", str, n)
        return made

    @app.workflow()
    async def parent(run: stead.Run) -> str:
        try:
            return await run.child(kid, task_id="the-child")
        except stead.ChildFailed as exc:
            return f"ChildFailed: {exc.status}"

    client = stead.Client(store, app)
    info = await client.start(parent)
    caplog.set_level(logging.INFO, logger="stead.worker")
    worker = asyncio.create_task(stead.Worker(app, store).run_until_idle())
    assert await asyncio.to_thread(started.wait, deadline)
    [child] = await client.children(info.run_id)
    asked = await client.cancel(child.run_id)
    assert (asked.status, asked.cancel_requested) == ("running", True)
    heard = f"run {child.run_id}: cancel requested"
    async with asyncio.timeout(deadline):  # the worker's lease keeper asks every second
        while not any(heard in r.getMessage() for r in caplog.records):
            await asyncio.sleep(0.02)
    release.set()
    await worker
    ended = await client.get(child.run_id)
    if calls_after:
        assert ended.status == "cancelled"
        assert await client.result(info.run_id) == "ChildFailed: cancelled"
    else:
        assert (ended.status, ended.cancel_requested) == ("completed", True)
        assert await client.result(child.run_id) == "made"
        assert await client.result(info.run_id) == "made"
    # Either way the call the cancel arrived in has its result journaled.
    assert ("last", "ok") in [(r.name, r.status) for r in await client.journal(child.run_id)]
