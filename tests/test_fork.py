"""Forks: a new run from a prefix of another's journal (`Client.fork`,
`stead runs fork`), on the refund example, at every position of its journal."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import stead
from stead.cli import main
from stead.examples import refund_agent, services
from stead.records import LineageKind, RecordKind, RecordStatus
from stead.workflow import waits


@pytest.fixture
def where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "services"
    monkeypatch.setenv(services.ENV, str(folder))
    yield folder


async def _approve(client: stead.Client, run_id: str, event_id: str) -> None:
    """Approve the run's open wait as its customer would: with the wait's
    token (signed for that run and wait, as the link the run sent holds)."""
    [wait] = await client.waits(run_id=run_id)
    token = waits.sign((await client.store.keyring()).current, run_id, wait.wait_id)
    delivery = await client.deliver(run_id, wait_id=wait.wait_id, token=token,
                                    event_id=event_id, payload={"approved": True},
                                    bind=json.loads(wait.bind))
    assert isinstance(delivery, stead.Accepted), delivery


async def _finish(client: stead.Client, run_id: str) -> stead.RunInfo:
    """Work the run to its end, approving its wait when it waits."""
    worker = stead.Worker(refund_agent.app, client.store)
    await worker.run_until_idle()
    if (await client.get(run_id)).status == "waiting":
        await _approve(client, run_id, f"approval-{run_id}")
        await worker.run_until_idle()
    return await client.get(run_id)


def _unknown_spans(journal: list[stead.Record]) -> set[int]:
    """The positions that fall between an effect's intent and its outcome."""
    spans: set[int] = set()
    intent: dict[str, int] = {}
    for r in journal:
        if r.kind != RecordKind.EFFECT:
            continue
        if r.status == RecordStatus.INTENT:
            intent[r.addr] = r.seq
        elif r.status in (RecordStatus.OK, RecordStatus.ERROR, RecordStatus.RECONCILED):
            spans.update(range(intent.pop(r.addr) + 1, r.seq + 1))
    return spans


def _without_refund_id(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "refund"}


async def test_a_fork_at_every_position_finishes_like_a_fresh_run_from_there(
    store: stead.Store, where: Path,
) -> None:
    client = stead.Client(store, refund_agent.app)
    original = await client.start(refund_agent.refund_order, "123", 4200, task_id="order-123")
    done = await _finish(client, original.run_id)
    assert done.status == "completed" and done.result["refunded"] is True
    journal = await client.journal(original.run_id)
    dispatched = next(r.seq for r in journal
                      if r.name == "dispatch_refund" and r.status == RecordStatus.OK)
    refused = _unknown_spans(journal)
    assert refused, "the example's effects have an intent and an outcome apart"

    for at in range(len(journal) + 1):
        before = len(services.Payments().calls())
        if at in refused:
            with pytest.raises(stead.ForkRefused, match="no outcome before that position"):
                await client.fork(original.run_id, at=at)
            continue
        fork = await client.fork(original.run_id, at=at)
        assert fork.created and fork.task_id is None
        assert [(r.seq, r.name, r.status) for r in await client.journal(fork.run_id)] == [
            (r.seq, r.name, r.status) for r in journal[:at]]
        finished = await _finish(client, fork.run_id)
        assert finished.status == "completed", (at, finished.error)
        assert _without_refund_id(finished.result) == _without_refund_id(done.result)
        new_refunds = len(services.Payments().calls()) - before
        if at > dispatched:  # the refund is in the prefix: reused, never sent again
            assert finished.result["refund"] == done.result["refund"] and new_refunds == 0
        else:  # sent live by the fork, under a key of its own
            assert new_refunds == 1, at
        facts = await client.task_state(f"run:{fork.run_id}")
        assert facts.get("status") == "refunded" and facts.get("refund_dispatched") is True

        lineage = await client.lineage(fork.run_id)
        assert lineage.parent is not None and lineage.parent.parent_id == original.run_id
        assert (lineage.parent.kind, lineage.parent.at_seq) == (LineageKind.FORK, at)
    forks = (await client.lineage(original.run_id)).children
    assert len(forks) == len(journal) + 1 - len(refused)
    assert (await client.get(original.run_id)).result == done.result  # untouched


async def test_a_fork_past_an_unknown_outcome_is_refused_and_creates_nothing(
    store: stead.Store, where: Path,
) -> None:
    app = stead.App("forks")

    def send(op: stead.Operation, to: str) -> str:
        raise stead.OutcomeUncertain("the mail server hung up")

    @app.workflow()
    async def mail(run: stead.Run, to: str) -> str:
        note = await run.step("note", lambda: "hello")
        return note + await run.effect("send", send, to)

    client = stead.Client(store, app)
    info = await client.start(mail, "a@example.com")
    await stead.Worker(app, store).run_until_idle()
    assert (await client.get(info.run_id)).status == "outcome_unknown"
    journal = await client.journal(info.run_id)
    intent = next(r.seq for r in journal if r.status == RecordStatus.INTENT)
    for at in range(intent + 1, len(journal) + 1):
        with pytest.raises(stead.ForkRefused) as refused:
            await client.fork(info.run_id, at=at)
        assert (refused.value.effect, refused.value.seq) == ("send", intent)
    assert (await client.lineage(info.run_id)).children == ()
    assert len(await client.list_runs()) == 1
    # Up to the intent, nothing unknown is kept: the fork is made.
    fork = await client.fork(info.run_id, at=intent)
    assert len(await client.journal(fork.run_id)) == intent
    for bad in (-1, len(journal) + 1):
        with pytest.raises(stead.InvalidInput, match="journal position"):
            await client.fork(info.run_id, at=bad)
    with pytest.raises(stead.UnknownRun):
        await client.fork("nope", at=0)


def test_stead_runs_fork_and_show_name_both_ends_of_the_link(
    db_url: str, where: Path,
) -> None:
    async def original() -> tuple[str, int]:
        store = await stead.open_store(db_url)
        try:
            client = stead.Client(store, refund_agent.app)
            info = await client.start(refund_agent.refund_order, "123", 4200)
            await stead.Worker(refund_agent.app, store).run_until_idle()  # to the wait
            return info.run_id, len(await client.journal(info.run_id))
        finally:
            await store.close()

    run_id, length = asyncio.run(original())
    cli = CliRunner()
    made = cli.invoke(main, ["--db", db_url, "runs", "fork", run_id, "--at", "2"])
    assert made.exit_code == 0, made.output
    fork_id = made.output.split("run ")[2].split()[0]
    assert "replays the 2 record(s)" in made.output
    shown = cli.invoke(main, ["--db", db_url, "runs", "show", fork_id])
    assert f"forked from run {run_id} at 2" in shown.output
    assert f"fork {fork_id} at 2" in cli.invoke(main, ["--db", db_url, "runs", "show",
                                                      run_id]).output
    as_json = json.loads(cli.invoke(main, ["--db", db_url, "runs", "show", fork_id,
                                           "--json"]).output)
    assert as_json["lineage"]["parent"]["parent_id"] == run_id
    again = cli.invoke(main, ["--db", db_url, "runs", "fork", run_id, "--at", "1", "--json"])
    assert again.exit_code == 0, again.output
    second = json.loads(again.output)
    assert second["forked_from"] == run_id and second["at"] == 1
    assert second["run_id"] not in (run_id, fork_id) and second["status"] == "pending"
    assert second["input"] == {"args": ["123", 4200], "kwargs": {},
                               "names": ["order_id", "amount"]}  # kept from its parent
    too_far = cli.invoke(main, ["--db", db_url, "runs", "fork", run_id, "--at",
                                str(length + 1)])
    assert too_far.exit_code == 1 and "journal position" in too_far.output


async def test_a_fork_does_not_count_an_attempt_it_only_cut_short(store: stead.Store) -> None:
    app = stead.App("cut")

    async def slow(run_id: str) -> str:
        # In flight until its sibling is journaled: its started marker rides along.
        while not any(r.name == "quick" and r.status == "ok"
                      for r in await store.load_journal(run_id)):
            await asyncio.sleep(0.01)
        return "slow"

    @app.workflow()
    async def pair(run: stead.Run) -> list[str]:
        return list(await asyncio.gather(
            run.step("slow", slow, run.id, retry=stead.Retry(attempts=1)),
            run.step("quick", lambda: "quick")))

    client = stead.Client(store, app)
    info = await client.start(pair)
    await stead.Worker(app, store).run_until_idle()
    journal = await client.journal(info.run_id)
    assert [(r.name, r.status) for r in journal] == [
        ("slow", "started"), ("quick", "ok"), ("slow", "ok")]
    # Forked between slow's start and its outcome: the attempt did not die
    # (the parent has its outcome), so the fork runs it as attempt 1 again.
    fork = await client.fork(info.run_id, at=2)
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(fork.run_id, timeout=5) == ["slow", "quick"]
    forked = [(r.kind, r.name, r.status, r.attempt) for r in await client.journal(fork.run_id)]
    assert forked == [("cut", "cut", "ok", 1), ("step", "quick", "ok", 1),
                      ("step", "slow", "ok", 1)]
