"""stead.contrib.langgraph against real worker processes: a graph SIGKILLed
mid-way is finished by a fresh worker without running a recorded node again,
and an interrupt answered with `stead approve` while no worker lives resumes
the graph once; the same answer again is a duplicate."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import stead
from tests.test_contrib_processes import DEADLINE, Procs
from tests.workers import agents_app
from tests.workers.procs import KILLED, wait_until

pytestmark = pytest.mark.slow
APP = "tests.workers.langgraph_app:app"


def approve(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`stead approve ARGS` as a person runs it: a process of its own."""
    return subprocess.run([sys.executable, "-m", "stead", "--db", db_url, "approve", *args],
                          capture_output=True, text=True, timeout=DEADLINE)


@pytest.fixture
def procs(sdk_dir: Path, db_url: str) -> Procs:
    return Procs(sdk_dir, db_url)


def _recorded_nodes(journal: list[stead.Record]) -> list[str]:
    return [r.name.removeprefix("node ") for r in journal
            if r.kind == "step" and r.status == "ok"]


async def _waiting(store: stead.Store, run_id: str) -> bool:
    return (await store.get_run(run_id)).status == "waiting"


async def test_killed_mid_graph_a_fresh_worker_runs_no_recorded_node_again(
    procs: Procs, store: stead.Store,
) -> None:
    client = stead.Client(store)
    info = await client.start("refund_order", "123", False, version=1)
    try:
        first = procs.start(APP, "--crash", "after:1:node history")
        assert await procs.exit_code(first) == KILLED, procs.output()
        recorded = _recorded_nodes(await store.load_journal(info.run_id))
        assert "plan" in recorded and "history" in recorded and "review" not in recorded

        second = procs.start(APP)  # stops once the run waits for its interrupt
        assert await procs.exit_code(second) == 0, procs.output()
        assert await _waiting(store, info.run_id)
        ran = Counter(agents_app.lines("nodes.log"))
        for node in recorded:
            assert ran[node] == 1, (node, ran)  # recorded before the kill: never run again
        assert ran["lookup"] <= 2 and ran["review"] == 1
        [resume] = await client.resumes(info.run_id)
        assert resume.epoch == 2 and resume.details.classes["reuse"] >= len(recorded)
    finally:
        procs.stop_all()


async def test_killed_mid_program_a_fresh_worker_runs_no_recorded_task_again(
    procs: Procs, store: stead.Store,
) -> None:
    """The Functional API: the entrypoint runs again, its recorded tasks do not."""
    client = stead.Client(store)
    info = await client.start("forecasts", ["Paris", "Oslo"], version=1)
    try:
        first = procs.start(APP, "--crash", "after:1:task fetch")
        assert await procs.exit_code(first) == KILLED, procs.output()
        fetched = [json.loads(r.payload)["value"].split(":")[0]
                   for r in await store.load_journal(info.run_id)
                   if r.name == "task fetch" and r.status == "ok"]
        assert fetched  # at least the first fetch's result committed before the kill

        second = procs.start(APP)
        assert await procs.exit_code(second) == 0, procs.output()
        assert await _waiting(store, info.run_id)
        ran = Counter(agents_app.lines("nodes.log"))
        for city in fetched:
            assert ran[f"fetch {city}"] == 1, ran  # recorded before the kill: never again
        assert ran["summarize"] == 1
    finally:
        procs.stop_all()


async def test_an_interrupt_answered_while_no_worker_lives_resumes_once(
    procs: Procs, store: stead.Store, sdk_dir: Path, db_url: str,
) -> None:
    info = await stead.Client(store).start("refund_order", "123", version=1)
    try:
        first = procs.start(APP, "--stay")

        async def asked() -> bool:
            return (sdk_dir / "interrupt.json").exists() and await _waiting(store, info.run_id)

        await wait_until("the run to wait on its interrupt", asked, DEADLINE)
        first.kill()  # a crash while the run waits
        assert await procs.exit_code(first) == KILLED
        request = json.loads((sdk_dir / "interrupt.json").read_text())
        token = sdk_dir / "token"
        token.write_text(request["token"])
        answer = (info.run_id, "--wait", request["wait_id"], "--token-file", str(token),
                  "--payload", json.dumps({"note": "ok by Ann"}))
        ok = approve(db_url, *answer)
        assert ok.returncode == 0 and ok.stdout.lower().startswith("accepted"), ok.stdout

        fresh = procs.start(APP)
        assert await procs.exit_code(fresh) == 0, procs.output()
        result = await stead.Client(store).result(info.run_id)
        assert result["decision"] == {"approved": True, "note": "ok by Ann"}
        assert result["receipt"] == "refunded 4200 on order 123"
        again = approve(db_url, *answer)
        assert again.returncode == 0 and again.stdout.lower().startswith("duplicate"), \
            again.stdout
        assert len(agents_app.lines("ledger.log")) == 1  # the effect node sent once
        ran = Counter(agents_app.lines("nodes.log"))
        assert ran["plan"] == ran["history"] == ran["lookup"] == 1
        assert ran["review"] == 2 and ran["reviewed"] == 1  # rerun from its start, once
    finally:
        procs.stop_all()


@pytest.mark.parametrize("idempotent", [True, False])
async def test_an_effect_node_killed_after_sending_is_never_silently_repeated(
    procs: Procs, store: stead.Store, sdk_dir: Path, idempotent: bool,
) -> None:
    """Killed between the refund going out and its outcome being journaled: an
    idempotent effect node is resent under the same key; one that is not
    stops the run for a person, nothing sent again."""
    client = stead.Client(store)
    info = await client.start("refund_order", "123", False, idempotent, version=1)
    try:
        first = procs.start(APP)
        assert await procs.exit_code(first) == 0, procs.output()
        [w] = await client.waits(run_id=info.run_id)
        (sdk_dir / "die-after-sending").touch()
        assert isinstance(await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1",
                                               payload={"approved": True},
                                               bind=json.loads(w.bind)), stead.Accepted)
        dying = procs.start(APP)
        assert await procs.exit_code(dying) == KILLED, procs.output()
        fresh = procs.start(APP)
        assert await procs.exit_code(fresh) == 0, procs.output()
        sent = agents_app.lines("ledger.log")
        if idempotent:
            assert (await client.get(info.run_id)).status == "completed"
            assert len(sent) == 2 and sent[0] == sent[1]  # resent once, under the same key
        else:
            assert (await client.get(info.run_id)).status == "outcome_unknown"
            assert len(sent) == 1  # not sent again: `stead reconcile` decides
    finally:
        procs.stop_all()
