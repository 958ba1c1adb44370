"""What a client reads, typed: waiting for a status, a takeover's details, a
stop on an unknown outcome, a duplicate delivery; and `op.accepted` from a sync
effect function."""

from __future__ import annotations

import asyncio
import json

import pytest

import stead
from stead.records import RecordKind, RecordStatus, ResumeClass
from tests.helpers import Calls, Crash, crash_then_resume

FAST = stead.WorkerOptions(poll_interval=0.01)


async def test_wait_for_returns_the_run_once_it_reaches_a_status(store: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run, fail: bool) -> str:
        await run.step("pause", asyncio.sleep, 0.05)
        if fail:
            raise ValueError("no")
        return "ok"

    client = stead.Client(store, app)
    good = await client.start(wf, False)
    with pytest.raises(stead.StatusNotReached, match=r"still not there after 0\.1 s"):
        await client.wait_for(good.run_id, "completed", timeout=0.1)  # no worker yet
    worker = stead.Worker(app, store, FAST)
    task = asyncio.create_task(worker.run())
    try:
        done = await client.wait_for(good.run_id, ["completed", "failed"], timeout=10)
        assert done.status == "completed" and done.result == "ok"
        bad = await client.start(wf, True)
        with pytest.raises(stead.StatusNotReached, match="it ended as failed") as caught:
            await client.wait_for(bad.run_id, ["waiting"], timeout=10)
        assert caught.value.status == "failed"
    finally:
        worker.stop()
        await task
    with pytest.raises(stead.SteadError, match="unknown status 'finished'"):
        await client.wait_for(good.run_id, ["finished"], timeout=1)


async def test_resume_details_are_typed(fstore: stead.Store, clock: stead.FakeClock) -> None:
    app = stead.App("t")
    calls = Calls()
    crashed = False

    def second() -> str:
        nonlocal crashed
        if not crashed:
            crashed = True
            raise Crash()
        return "b"

    async def send(op: stead.Operation) -> str:
        calls.hit("send")
        return "sent"

    @app.workflow()
    async def wf(run: stead.Run) -> list[str]:
        a = await run.step("first", lambda: "a")
        sent = await run.effect("send", send)
        return [a, sent, await run.step("second", second)]

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id, timeout=10) == ["a", "sent", "b"]
    [resume] = await client.resumes(info.run_id)
    details = resume.details
    assert isinstance(details, stead.ResumeDetails)
    assert details.journal_records == 3  # first, the intent and outcome of send
    assert details.classes == {ResumeClass.REUSE: 2}  # the step and the effect
    assert details.kinds == {RecordKind.STEP: 1, RecordKind.EFFECT: 2}
    assert calls == {"send": 1}
    # Rows written before kinds were counted read as empty counts, not errors.
    old = stead.ResumeDetails.from_json(json.dumps({"journal_records": 2,
                                                    "classes": {"reuse": 2}}))
    assert old.kinds == {} and old.classes == {ResumeClass.REUSE: 2}


async def test_an_outcome_unknown_stop_is_typed(fstore: stead.Store,
                                                clock: stead.FakeClock) -> None:
    app = stead.App("t")

    async def mail(op: stead.Operation, to: str) -> str:
        raise TimeoutError("no answer")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        return await run.effect("mail", mail, "a@b.c")

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore, FAST).run_until_idle()
    got = await client.get(info.run_id)
    stop = got.outcome_unknown
    assert isinstance(stop, stead.UnknownOutcome)
    assert (stop.name, stop.key, stop.addr, stop.attempt) == ("mail", f"{info.run_id}:0", "0", 1)
    assert stop.arguments == {"args": ["a@b.c"], "kwargs": {}, "names": ["to"]}
    assert "no outcome recorded" in stop.known
    ok = await client.start(wf)
    assert (await client.get(ok.run_id)).outcome_unknown is None


async def test_a_sync_effect_function_journals_its_acceptance(store: stead.Store) -> None:
    app = stead.App("t")
    asked: list[str | None] = []

    def submit(op: stead.Operation) -> str:
        op.accepted("job-471")  # blocks until journaled; no await in a sync function
        raise stead.OutcomeUncertain("the connection dropped after the job was created")

    def check(op: stead.Operation) -> stead.Outcome:
        asked.append(op.external_id)
        return stead.Outcome.done("passed")

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        return await run.effect("ci", submit, check=check)

    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store, FAST).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == "passed"
    journal = await client.journal(info.run_id)
    accepted = [r for r in journal if r.status == RecordStatus.ACCEPTED]
    assert [json.loads(r.payload)["external_id"] for r in accepted] == ["job-471"]
    assert asked == ["job-471"]


async def test_a_duplicate_names_the_wait_and_the_original_event(store: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow()
    async def wf(run: stead.Run) -> object:
        w = await run.wait("approval", token=False)
        return await w

    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store, FAST).run_until_idle()
    [wait] = await client.waits(run_id=info.run_id)
    first = await client.deliver(info.run_id, event_id="evt-9", kind="approval", payload=1)
    assert first == stead.Accepted("evt-9", wait.wait_id)
    again = await client.deliver(info.run_id, event_id="evt-9", kind="approval", payload=1)
    assert isinstance(again, stead.Duplicate)
    assert (again.event_id, again.wait_id, again.original_event_id) == (
        "evt-9", wait.wait_id, "evt-9")
    [stored] = await client.events(info.run_id)
    assert again.received_at == stored.received_at
