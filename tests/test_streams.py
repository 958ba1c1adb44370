"""Durable streams, on both stores: appends from the workflow are kept once
across replays, a call's try that dies has its entries superseded before
the new try's, a reader resumes from its offset, and retention removes a
run's streams with it. The process-level crash test is in
test_stream_processes.py."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

import stead
from stead.llm.model import Completion
from tests.helpers import Crash, Gate, crash_then_resume

DAY = 86400.0


async def _all(client: stead.Client, run_id: str, name: str,
               after: int = 0) -> list[stead.StreamEntry]:
    return [e async for e in client.read_stream(run_id, name, after=after, poll=0.01)]


def _shape(entries: Sequence[stead.StreamEntry]) -> list[tuple[int, str, Any, bool]]:
    return [(e.offset, e.kind, e.value, e.superseded) for e in entries]


async def test_a_replayed_append_is_kept_once_and_a_died_try_is_superseded(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    app = stead.App("t")
    tries = [0]

    @app.workflow(version=1)
    async def answer(run: stead.Run) -> str:
        progress = run.stream("progress")
        await progress.append("started")

        async def think() -> str:
            tries[0] += 1
            await progress.append(f"partial {tries[0]}")
            if tries[0] == 1:
                raise Crash()  # the worker dies mid-call
            return "thought"

        thought = await run.step("think", think)
        await progress.append("finished")
        await progress.close()
        return thought

    client = stead.Client(fstore, app)
    info = await client.start(answer)
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id) == "thought"
    entries = await _all(client, info.run_id, "progress")
    [note] = [e for e in entries if e.kind == stead.EntryKind.SUPERSEDED]
    assert note.value["offsets"] == [2, 2] and note.value["count"] == 1
    assert _shape(entries) == [
        (1, "value", "started", False),      # replayed after the takeover: not appended again
        (2, "value", "partial 1", True),     # the try that died
        (3, "superseded", note.value, False),
        (4, "value", "partial 2", False),
        (5, "value", "finished", False),
        (6, "closed", None, False),
    ]
    # Reconnecting after an offset gives exactly what came after it.
    assert _shape(await _all(client, info.run_id, "progress", after=3)) == _shape(entries[3:])


async def test_a_reader_follows_a_live_run_until_the_stream_is_closed(
    store: stead.Store,
) -> None:
    app = stead.App("t")
    gate = Gate()

    @app.workflow(version=1)
    async def wf(run: stead.Run) -> None:
        s = run.stream("s")
        await s.append(1)
        await run.step("gate", gate.step)
        await s.append(2)
        await s.close()

    client = stead.Client(store, app)
    info = await client.start(wf)
    got: list[Any] = []

    async def read() -> None:
        async for e in client.read_stream(info.run_id, "s", poll=0.01):
            got.append(e.value)
            if len(got) == 1:
                gate.open.set()  # the second value is appended only after the first was read

    reader = asyncio.create_task(read())
    worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01))
    await worker.run_until_idle()
    await asyncio.wait_for(reader, 30)
    assert got == [1, 2, None]


async def test_a_model_feeds_its_deltas_and_a_replayed_answer_sends_none(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    app = stead.App("t")
    asked = [0]

    class Streaming:
        name = "streaming"

        async def complete(self, messages: Sequence[Mapping[str, Any]], *,
                           on_text: stead.Stream, **params: Any) -> Completion:
            asked[0] += 1
            for word in ("Hello", " world"):
                await on_text(word)
            return Completion(text="Hello world")

    async def boom() -> None:
        raise Crash()

    crashed = [False]

    @app.workflow(version=1)
    async def wf(run: stead.Run) -> str:
        c = await run.llm("say", Streaming(), [{"role": "user", "content": "hi"}],
                          on_text=run.stream("answer"))
        if not crashed[0]:
            crashed[0] = True
            await run.step("boom", boom)
        return c.text

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id) == "Hello world"
    assert asked == [1]
    assert [e.value for e in await _all(client, info.run_id, "answer")] == ["Hello", " world"]


async def test_appending_after_close_fails_the_run_with_stream_closed(
    store: stead.Store,
) -> None:
    app = stead.App("t")

    @app.workflow(version=1)
    async def wf(run: stead.Run) -> None:
        await run.stream("s").close()
        await run.stream("s").append("late")

    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store).run_until_idle()
    with pytest.raises(stead.RunFailed, match="is closed: nothing can be appended"):
        await client.result(info.run_id)


async def test_bad_names_offsets_and_runs_are_refused(store: stead.Store) -> None:
    app = stead.App("t")

    @app.workflow(version=1)
    async def wf(run: stead.Run) -> None:
        run.stream("")

    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store).run_until_idle()
    with pytest.raises(stead.RunFailed, match="stream's name"):
        await client.result(info.run_id)
    with pytest.raises(stead.InvalidInput, match="offset"):
        await _all(client, info.run_id, "s", after=-1)
    with pytest.raises(stead.InvalidInput, match="name"):
        await _all(client, info.run_id, "x" * 201)
    with pytest.raises(stead.UnknownRun):
        await _all(client, "no-such-run", "s")


async def test_retention_removes_a_run_s_streams_with_it(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    app = stead.App("t")

    @app.workflow(version=1)
    async def wf(run: stead.Run) -> None:
        await run.stream("s").append("kept until the run goes")

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    assert len(await fstore.read_stream(info.run_id, "s")) == 1
    clock.advance(31 * DAY)
    report = await stead.prune(fstore, 30 * DAY)
    assert report.deleted == 1
    assert await fstore.read_stream(info.run_id, "s") == []


async def test_the_dashboard_serves_a_stream_as_sse_from_last_event_id(
    store: stead.Store,
) -> None:
    import httpx

    from stead.web import create_app
    from tests.web_app import UI_TOKEN

    app = stead.App("t")

    @app.workflow(version=1)
    async def wf(run: stead.Run) -> None:
        for word in ("one", "two", "three"):
            await run.stream("answer").append(word)
        await run.stream("answer").close()

    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store).run_until_idle()
    asgi = create_app(app, store=store, token=UI_TOKEN)
    path = f"/runs/{info.run_id}/streams/answer"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://127.0.0.1:8484") as http:
        assert (await http.get(path)).status_code == 401  # reading needs a login
        login = await http.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
        assert csrf is not None
        r = await http.post("/login", data={"csrf": csrf.group(1), "who": "alice",
                                            "token": UI_TOKEN})
        assert r.status_code == 303
        r = await http.get(path, headers={"Last-Event-ID": "1"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        hint, *events = [block.splitlines() for block in r.text.strip().split("\n\n")]
        assert hint == ["retry: 1000"]  # the browser reconnects a second after a drop
        assert [e[:2] for e in events] == [["id: 2", "event: value"], ["id: 3", "event: value"],
                                          ["id: 4", "event: closed"]]
        assert events[0][2].startswith('data: {"offset":2,"kind":"value","value":"two"')
        assert (await http.get(path, headers={"Last-Event-ID": "x"})).status_code == 400
        assert (await http.get("/runs/nope/streams/answer")).status_code == 404


async def test_an_append_is_fenced_kept_once_per_key_and_refused_after_close(
    store: stead.Store,
) -> None:
    from stead.records import Fence, NewRun
    from stead.stream_records import NewEntry

    await store.create_run(NewRun("r1", "wf", 1, None, '{"args":[],"kwargs":{}}'))
    [row] = await store.claim("w1", ["wf@1"], 30.0, 1)
    fence = Fence("r1", row.epoch, "w1")
    value = stead.EntryKind.VALUE
    assert await store.append_stream(fence, "s", NewEntry("0", value, '"a"', 1.0)) == 1
    assert await store.append_stream(fence, "s", NewEntry("0", value, '"b"', 2.0)) == 1
    with pytest.raises(stead.StaleLease):
        await store.append_stream(Fence("r1", row.epoch + 1, "w2"), "s",
                                  NewEntry("1", value, '"stale"', 3.0))
    assert await store.append_stream(fence, "s", NewEntry("2", stead.EntryKind.CLOSED,
                                                          "null", 4.0)) == 2
    with pytest.raises(stead.StreamClosed):
        await store.append_stream(fence, "s", NewEntry("3", value, '"late"', 5.0))
    assert [(e.offset, e.kind, e.value) for e in await store.read_stream("r1", "s")] == [
        (1, "value", "a"), (2, "closed", None)]


async def test_a_value_the_workflow_drew_is_journaled_before_it_is_streamed(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    app = stead.App("t")
    crashed = [False]

    async def boom() -> None:
        if not crashed[0]:
            crashed[0] = True
            raise Crash()

    @app.workflow(version=1)
    async def wf(run: stead.Run) -> str:
        drawn = run.now().isoformat()  # buffered: it rides with the next write
        await run.stream("s").append(drawn)
        await run.step("boom", boom)
        return drawn

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await crash_then_resume(app, fstore, clock)
    # The replay drew the same time as the stream holds: it was journaled first.
    [entry] = await _all(client, info.run_id, "s")
    assert entry.value == await client.result(info.run_id)


async def test_a_dry_replay_of_a_streaming_run_writes_nothing_and_finds_it_fits(
    store: stead.Store,
) -> None:
    from stead import dryrun, takeover

    app = stead.App("t")

    @app.workflow(version=1)
    async def wf(run: stead.Run) -> int:
        await run.stream("s").append("a")
        n = await run.step("one", tick)
        await run.stream("s").append("b")
        return n

    async def tick() -> int:
        return 1

    client = stead.Client(store, app)
    info = await client.start(wf)
    await stead.Worker(app, store).run_until_idle()
    stored = await takeover.load_stored(store, await store.get_run(info.run_id))
    [replayed] = await dryrun.replay_all(app, [stored])
    assert replayed.finding is None
    assert [e.value for e in await _all(client, info.run_id, "s")] == ["a", "b"]


async def test_reading_a_pruned_or_unknown_run_is_unknown_run_or_404(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    """What docs/concepts/streams.md says a reader gets: from a run that is not there
    (never was, or pruned) `UnknownRun` in Python and 404 over HTTP; from a stream the
    run never wrote, nothing (an event stream without events), once the run has ended."""
    import httpx

    from stead.web import create_app

    app = stead.App("t")

    @app.workflow(version=1)
    async def wf(run: stead.Run) -> None:
        await run.stream("answer").append("gone with the run")

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    asgi = create_app(app, store=fstore, public=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://127.0.0.1:8484") as http:
        async def status(run_id: str, name: str) -> tuple[int, str]:
            r = await http.get(f"/runs/{run_id}/streams/{name}")
            return r.status_code, r.text

        assert [e.value for e in await _all(client, info.run_id, "answer")] == \
            ["gone with the run"]
        assert await _all(client, info.run_id, "never-written") == []
        assert await status(info.run_id, "never-written") == (200, "retry: 1000\n\n")
        clock.advance(31 * DAY)
        assert (await stead.prune(fstore, 30 * DAY)).deleted == 1
        for run_id in (info.run_id, "no-such-run"):
            with pytest.raises(stead.UnknownRun):
                await _all(client, run_id, "answer")
            assert await status(run_id, "answer") == (404, f"There is no run {run_id}.")
