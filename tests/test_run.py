"""What a workflow sees: steps, model calls and recorded values, live and on replay."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import pytest

import stead
from stead.store.postgres import PostgresStore
from tests.helpers import Calls, Crash, crash_then_resume


async def test_steps_run_once_and_replay_after_a_crash(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")
    calls = Calls()
    crashed = [False]
    model = stead.ScriptedModel(["refund"])

    def load(ticket: str) -> dict[str, str]:
        calls.hit("load")
        return {"id": ticket}

    async def flaky() -> str:
        calls.hit("flaky")
        if not crashed[0]:
            crashed[0] = True
            raise Crash()
        return "done"

    @app.workflow(version=1)
    async def triage(run: stead.Run, ticket: str) -> dict[str, object]:
        t = await run.step("load", load, ticket)
        answer = await run.llm("classify", model, [{"role": "user", "content": ticket}])
        at = run.now()
        ident = run.uuid()
        r = run.random()
        tail = await run.step("flaky", flaky)
        return {"t": t, "label": answer.text, "at": at.isoformat(), "id": str(ident),
                "r": r, "tail": tail}

    client = stead.Client(fstore, app)
    info = await client.start(triage, "T-1")
    await crash_then_resume(app, fstore, clock)
    result = await client.result(info.run_id)
    assert calls == {"load": 1, "flaky": 2}
    assert len(model.calls) == 1
    assert result["label"] == "refund" and result["tail"] == "done"
    # now/uuid/random ride along with the next commit, which the crash prevented:
    # the new worker drew them afresh, and each is recorded once.
    journal = await client.journal(info.run_id)
    assert [r.seq for r in journal] == list(range(len(journal)))
    assert [r.kind for r in journal] == ["step", "llm", "now", "uuid", "random", "step"]
    assert journal[2].payload.strip('"') == result["at"]
    resumes = await client.resumes(info.run_id)
    assert len(resumes) == 1
    assert resumes[0].epoch == 2 and resumes[0].from_seq == 2 and resumes[0].reused == 2
    assert resumes[0].code_version == "triage@1"


async def test_recorded_values_replay_identically(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")
    seen: list[tuple[dt.datetime, uuid.UUID, float]] = []
    crashed = [False]

    def boom() -> int:
        if not crashed[0]:
            crashed[0] = True
            raise Crash()
        return 1

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        values = (run.now(), run.uuid(), run.random())
        await run.step("commit", lambda: 0)
        seen.append(values)
        await run.step("boom", boom)

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await crash_then_resume(app, fstore, clock)
    assert (await client.get(info.run_id)).status == "completed"
    assert len(seen) == 2 and seen[0] == seen[1]
    assert seen[0][0].tzinfo is not None


async def test_gather_of_multi_step_branches_replays_whatever_the_timing(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    """Branches finish in a different order live and on replay; addresses do not care."""
    app = stead.App("t")
    calls = Calls()
    crashed = [False]

    async def work(name: str, delay: float) -> str:
        calls.hit(name)
        await asyncio.sleep(delay)
        return name

    async def boom() -> None:
        if not crashed[0]:
            crashed[0] = True
            raise Crash()

    async def branch(run: stead.Run, tag: str, delay: float) -> list[str]:
        a = await run.step(f"{tag}1", work, f"{tag}1", delay)
        b = await run.step(f"{tag}2", work, f"{tag}2", 0.0)
        return [a, b]

    @app.workflow()
    async def wf(run: stead.Run) -> list[list[str]]:
        out = await asyncio.gather(branch(run, "a", 0.05), branch(run, "b", 0.0))
        await run.step("boom", boom)
        return list(out)

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id) == [["a1", "a2"], ["b1", "b2"]]
    assert calls == {"a1": 1, "a2": 1, "b1": 1, "b2": 1}
    journal = await client.journal(info.run_id)
    assert {r.addr for r in journal if r.name != "boom"} == {"b0.0", "b0.1", "b1.0", "b1.1"}


async def test_step_error_is_journaled_and_raised_the_same_on_replay(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")
    calls = Calls()
    crashed = [False]
    caught: list[tuple[str, str]] = []

    def bad() -> None:
        calls.hit("bad")
        raise ValueError("no such order")

    def boom() -> None:
        if not crashed[0]:
            crashed[0] = True
            raise Crash()

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        try:
            await run.step("bad", bad)
        except stead.StepError as exc:
            caught.append((exc.error_type, exc.message))
        await run.step("boom", boom)
        return "handled"

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id) == "handled"
    assert calls["bad"] == 1
    assert caught == [("ValueError", "no such order")] * 2


async def test_retry_attempts_are_journaled(fstore: stead.Store) -> None:
    app = stead.App("t")
    calls = Calls()

    def flaky() -> str:
        calls.hit("flaky")
        if calls["flaky"] < 3:
            raise ConnectionError("try later")
        return "ok"

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        return await run.step("flaky", flaky, retry=stead.Retry(attempts=5, backoff=0.01))

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id) == "ok"
    journal = await client.journal(info.run_id)
    assert [(r.attempt, r.status) for r in journal] == [(1, "error"), (2, "error"), (3, "ok")]
    assert {r.addr for r in journal} == {"0"}


async def test_retry_gives_up_after_its_attempts(fstore: stead.Store) -> None:
    app = stead.App("t")

    def always() -> None:
        raise ConnectionError("down")

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        await run.step("always", always, retry=stead.Retry(attempts=2, backoff=0.0))

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    got = await client.get(info.run_id)
    assert got.status == "failed"
    assert got.error is not None and got.error["type"] == "StepError"
    assert "after 2 attempt(s)" in got.error["message"]


async def test_retry_backoff_is_durable_across_a_takeover(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    """The next attempt time is journaled; a new worker waits only the remainder."""
    app = stead.App("t")
    calls = Calls()

    def flaky() -> str:
        calls.hit("flaky")
        if calls["flaky"] == 1:
            raise ConnectionError("later")
        return "ok"

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        return await run.step("flaky", flaky, retry=stead.Retry(attempts=3, backoff=3600))

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    first = stead.Worker(app, fstore, stead.WorkerOptions(shutdown_grace=0.01))
    task = asyncio.create_task(first.run())
    for _ in range(200):
        if len(await client.journal(info.run_id)) == 1:
            break
        await asyncio.sleep(0.01)
    first.stop()
    await task
    journal = await client.journal(info.run_id)
    assert len(journal) == 1 and journal[0].status == "error"
    clock.advance(3600)  # the backoff has passed while no worker ran
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "ok"
    assert calls["flaky"] == 2


async def test_changed_code_stops_the_run_as_incompatible(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    old = stead.App("t")
    crashed = [False]

    def boom() -> None:
        if not crashed[0]:
            crashed[0] = True
            raise Crash()

    @old.workflow(name="wf")
    async def wf_v1(run: stead.Run) -> None:
        await run.step("first", lambda: 1)
        await run.step("boom", boom)

    new = stead.App("t")
    calls = Calls()

    @new.workflow(name="wf")
    async def wf_edited(run: stead.Run) -> None:
        await run.step("renamed", lambda: calls.hit("renamed"))

    client = stead.Client(fstore, old)
    info = await client.start(wf_v1)
    await stead.Worker(old, fstore).run_until_idle()
    clock.advance(31)
    await stead.Worker(new, fstore).run_until_idle()
    got = await client.get(info.run_id)
    assert got.status == "incompatible_checkpoint"
    assert got.error is not None and "'first'" in got.error["message"]
    assert calls["renamed"] == 0
    assert len(await client.journal(info.run_id)) == 1  # nothing lost, nothing added


async def test_changed_arguments_are_detected(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")
    crashed = [False]
    arg = ["a"]

    def boom() -> None:
        if not crashed[0]:
            crashed[0] = True
            raise Crash()

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        await run.step("echo", lambda x: x, arg[0])
        await run.step("boom", boom)

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    arg[0] = "b"  # control code that is not deterministic
    clock.advance(31)
    await stead.Worker(app, fstore).run_until_idle()
    got = await client.get(info.run_id)
    assert got.status == "incompatible_checkpoint"
    assert got.error is not None and "other arguments" in got.error["message"]


async def test_removed_calls_are_detected_when_the_workflow_returns(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")
    short = [False]

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        await run.step("one", lambda: 1)
        if short[0]:
            return
        await run.step("two", lambda: 2)
        raise Crash()

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    short[0] = True
    clock.advance(31)
    await stead.Worker(app, fstore).run_until_idle()
    got = await client.get(info.run_id)
    assert got.status == "incompatible_checkpoint"
    assert got.error is not None and "'two'" in got.error["message"]


async def test_unhandled_error_fails_the_run(fstore: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        raise RuntimeError("bad plan")

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    with pytest.raises(stead.RunFailed, match="bad plan"):
        await client.result(info.run_id)


async def test_a_step_costs_one_commit(fstore: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run, n: int) -> int:
        for i in range(n):
            await run.step("s", lambda i=i: i)
        return n

    client = stead.Client(fstore, app)
    await client.start(wf, 0)
    await client.start(wf, 50)
    worker = stead.Worker(app, fstore, stead.WorkerOptions(concurrency=1))
    before = fstore.commits
    await worker.run_until_idle()
    # per run: 1 claim + n steps + 1 finish; plus the final empty claim where a
    # poll is a write (on SQLite an empty poll only reads); plus the worker's
    # heartbeat as it starts and the one saying it stopped, and its process
    # recorded as it starts and forgotten as it stops (for dead-holder checks)
    # (and on PostgreSQL the journal's coming day partitions, made as it starts)
    empty_run, full_run, worker_beats = 1 + 0 + 1, 1 + 50 + 1, 2 + 2
    days = 1 if isinstance(fstore, PostgresStore) else 0
    total = empty_run + full_run + worker_beats + days
    assert fstore.commits - before in (total, total + 1)


async def test_an_incompatible_run_resumes_once_fitting_code_is_back(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    crashed = [False]

    def boom() -> None:
        if not crashed[0]:
            crashed[0] = True
            raise Crash()

    def build(step_name: str) -> stead.App:
        app = stead.App("t")

        @app.workflow(name="wf")
        async def wf(run: stead.Run) -> str:
            await run.step(step_name, lambda: 1)
            await run.step("boom", boom)
            return "done"

        return app

    good, bad = build("first"), build("renamed")
    client = stead.Client(fstore, good)
    info = await client.start("wf")
    await stead.Worker(good, fstore).run_until_idle()
    clock.advance(31)
    await stead.Worker(bad, fstore).run_until_idle()  # a deploy that does not fit
    assert (await client.get(info.run_id)).status == "incompatible_checkpoint"
    with pytest.raises(stead.UnknownRun):
        await client.retry("nope")
    retried = await client.retry(info.run_id)  # the fix is rolled out
    assert retried.status == "running" and retried.error is None
    await stead.Worker(good, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "done"
    with pytest.raises(stead.NotStopped):
        await client.retry(info.run_id)
