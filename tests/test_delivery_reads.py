"""A delivery reads what it judges against in one statement after its run's
lock (`run_waits_and_event`): the run's waits and the event already stored
under the delivered id, which must be found whether the run has several
waits, none, or is unknown."""

from __future__ import annotations

from typing import Any

import stead
from stead.records import Verdict


def two_waits_app() -> tuple[stead.App, stead.Workflow[..., Any]]:
    app = stead.App("reads")

    @app.workflow()
    async def both(run: stead.Run) -> Any:
        first = await run.wait("first", token=False)
        second = await run.wait("second", token=False)
        return [await first, await second]

    return app, both


async def test_a_redelivery_is_a_duplicate_among_several_waits(store: stead.Store) -> None:
    app, both = two_waits_app()
    client = stead.Client(store, app)
    info = await client.start(both)
    await stead.Worker(app, store).run_until_idle()
    assert len(await client.waits(run_id=info.run_id)) == 2
    accepted = await client.deliver(info.run_id, event_id="e1", kind="first", payload=1)
    assert isinstance(accepted, stead.Accepted)
    again = await client.deliver(info.run_id, event_id="e1", kind="first", payload=1)
    assert isinstance(again, stead.Duplicate)
    assert again.wait_id == accepted.wait_id
    # Another event for the consumed wait is judged against the waits as they are now.
    other = await client.deliver(info.run_id, event_id="e2", kind="first", payload=2)
    assert isinstance(other, stead.Rejected) and other.reason == "already_consumed"
    assert isinstance(await client.deliver(info.run_id, event_id="e3", kind="second",
                                           payload=3), stead.Accepted)
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id) == [1, 3]


async def test_an_event_for_a_run_without_waits_is_stored_once_and_judged_again(
        store: stead.Store) -> None:
    app = stead.App("nowaits")

    @app.workflow()
    async def plain(run: stead.Run) -> int:
        return 1

    client = stead.Client(store, app)
    info = await client.start(plain)
    await stead.Worker(app, store).run_until_idle()
    for _ in range(2):  # no wait row to carry the stored event: one row still does
        verdict = await client.deliver(info.run_id, event_id="x", kind="go", payload=0)
        assert isinstance(verdict, stead.Rejected)
    for _ in range(2):  # nor a run
        verdict = await client.deliver("no-such-run", event_id="y", kind="go", payload=0)
        assert isinstance(verdict, stead.Rejected)
    events = await client.events(info.run_id)
    assert [(e.event_id, e.verdict) for e in events] == [("x", Verdict.REJECTED)]
