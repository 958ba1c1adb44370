"""stead.contrib.crewai in real worker processes: a crew whose refund tool
needs a person's approval, SIGKILLed mid-tool, while it waits for the
approval (given later with `stead approve`), right after the refund went
out, and mid-stream of a streamed model turn; a flow SIGKILLed while it
waits for a person's feedback. The provider's log (model.log) shows each
model turn asked once over every process (a streamed turn SIGKILLed
mid-stream is asked again, once), the payment service's ledger one refund,
the flow's log each method run once.

CrewAI pins openai and mcp releases the other extras do not take: these tests
run in an environment of their own (`pip install -e '.[crewai,dev-crewai]'`,
docs/guides/agent-author/crewai.md) and are skipped where CrewAI is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("crewai")

import stead
from tests import stress
from tests.workers import crewai_app
from tests.workers.procs import KILLED, wait_until

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parent / "workers" / "sdk_worker.py"
APP = "tests.workers.crewai_app:app"
DEADLINE = 90.0 * stress.slow()  # scaled to the machine's load (tests/stress.py)


class Procs:
    """Worker processes sharing the test's database and $SDK_DIR."""

    def __init__(self, tmp: Path, db_url: str) -> None:
        self.tmp, self.db_url = tmp, db_url
        self.procs: list[subprocess.Popen[bytes]] = []
        self.app = APP

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"worker-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--db", self.db_url, "--app", self.app, *args],
            stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "SDK_DIR": str(self.tmp), "PYTHONUNBUFFERED": "1"})
        log.close()
        self.procs.append(proc)
        return proc

    def output(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:]
                         for p in sorted(self.tmp.glob("worker-*.log")))

    async def exit_code(self, proc: subprocess.Popen[bytes]) -> int:
        await wait_until("the worker to exit", lambda: proc.poll() is not None, DEADLINE)
        return proc.returncode

    async def finish(self, store: stead.Store, run_id: str) -> None:
        fresh = self.start()
        assert await self.exit_code(fresh) == 0, self.output()
        assert (await store.get_run(run_id)).status == "completed", self.output()


@pytest.fixture
def procs(sdk_dir: Path, db_url: str) -> Iterator[Procs]:
    p = Procs(sdk_dir, db_url)
    yield p
    for proc in p.procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def stead_cli(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`stead ARGS` as a person runs it: a process of its own."""
    return subprocess.run([sys.executable, "-m", "stead", "--db", db_url, *args],
                          capture_output=True, text=True, timeout=DEADLINE)


async def _waiting(store: stead.Store, run_id: str) -> bool:
    return (await store.get_run(run_id)).status == "waiting"


async def _approve(procs: Procs, store: stead.Store, run_id: str, db_url: str) -> None:
    """Run until the refund's approval is asked, kill the worker, approve from the CLI."""
    first = procs.start("--stay")

    async def asked() -> bool:
        return (procs.tmp / "approval.json").exists() and await _waiting(store, run_id)

    await wait_until("the run to wait for its approval", asked, DEADLINE)
    first.kill()  # a crash while the run waits
    assert await procs.exit_code(first) == KILLED
    request = json.loads((procs.tmp / "approval.json").read_text())
    assert request["tool"] == "refund"
    assert request["arguments"] == {"order_id": "123", "amount": 4200}
    token = procs.tmp / "token"
    token.write_text(request["token"])
    answer = ("approve", run_id, "--wait", request["wait_id"], "--token-file", str(token))
    ok = stead_cli(db_url, *answer)
    assert ok.returncode == 0 and ok.stdout.startswith("Accepted"), ok.stdout + ok.stderr
    again = stead_cli(db_url, *answer)
    assert again.returncode == 0 and again.stdout.startswith("Duplicate"), again.stdout


async def _killed_after_sending(procs: Procs, store: stead.Store, run_id: str) -> None:
    """A worker killed right after the refund went out, then one that finishes the run."""
    (procs.tmp / "die-after-sending").touch()
    dying = procs.start()
    assert await procs.exit_code(dying) == KILLED, procs.output()
    await procs.finish(store, run_id)


async def _refunded_once(store: stead.Store, run_id: str, asked: str = "asked") -> None:
    client = stead.Client(store)
    assert await client.result(run_id) == "Refunded order 123: rf_123."
    assert crewai_app.lines("model.log") == [asked] * 3  # each turn asked once, ever
    assert crewai_app.lines("ledger.log") == ["123 4200 refund-123"]  # sent once, its key
    journal = await client.journal(run_id)
    assert [r.seq for r in journal] == list(range(len(journal)))
    outcomes = [(r.addr, r.attempt) for r in journal if r.status in ("ok", "error")]
    assert len(outcomes) == len(set(outcomes)), outcomes
    models = [stead.Completion.from_json(json.loads(r.payload)) for r in journal
              if r.kind == "llm"]
    assert len(models) == 3 and all(m.provider == "litellm" for m in models)


async def test_a_crew_killed_mid_tool_asks_no_turn_again(
    procs: Procs, store: stead.Store, db_url: str,
) -> None:
    info = await stead.Client(store).start("refund_order", "123", version=1)
    (procs.tmp / "die-in-tool").touch()
    first = procs.start()
    assert await procs.exit_code(first) == KILLED, procs.output()
    assert crewai_app.lines("model.log") == ["asked"]
    await _approve(procs, store, info.run_id, db_url)
    await procs.finish(store, info.run_id)
    # The tool died before its result was journaled: it ran again, once.
    assert crewai_app.lines("tools.log") == ["lookup 123", "lookup 123"]
    await _refunded_once(store, info.run_id)


async def test_a_crew_approved_from_the_cli_while_no_worker_lives_refunds_once(
    procs: Procs, store: stead.Store, db_url: str,
) -> None:
    info = await stead.Client(store).start("refund_order", "123", version=1)
    await _approve(procs, store, info.run_id, db_url)
    assert crewai_app.lines("model.log") == ["asked"] * 2
    assert not crewai_app.lines("ledger.log")  # nothing sent before the approval
    await procs.finish(store, info.run_id)
    assert crewai_app.lines("tools.log") == ["lookup 123"]
    await _refunded_once(store, info.run_id)


async def test_a_crew_killed_right_after_its_refund_is_not_refunded_again(
    procs: Procs, store: stead.Store, db_url: str,
) -> None:
    info = await stead.Client(store).start("refund_order", "123", version=1)
    await _approve(procs, store, info.run_id, db_url)
    await _killed_after_sending(procs, store, info.run_id)
    await _refunded_once(store, info.run_id)  # the check found it: not sent again


async def test_a_streamed_crew_killed_mid_stream_asks_only_that_turn_again(
    procs: Procs, store: stead.Store, db_url: str,
) -> None:
    info = await stead.Client(store).start("refund_order_streamed", "123", version=1)
    (procs.tmp / "die-mid-stream").touch()
    first = procs.start()
    assert await procs.exit_code(first) == KILLED, procs.output()
    assert crewai_app.lines("model.log") == ["asked (streamed)"]  # a few chunks came, no answer
    (procs.tmp / "model.log").unlink()  # the turn that died unanswered: asked again, once
    await _approve(procs, store, info.run_id, db_url)
    await _killed_after_sending(procs, store, info.run_id)
    await _refunded_once(store, info.run_id, "asked (streamed)")
    # the journal holds each whole answer, built from its chunks
    journal = await stead.Client(store).journal(info.run_id)
    texts = [stead.Completion.from_json(json.loads(r.payload)).text for r in journal
             if r.kind == "llm"]
    assert texts[-1] == "Thought: The refund went out.\nFinal Answer: Refunded order 123: rf_123."


async def test_a_crew_on_openais_own_client_killed_after_its_refund_asks_no_turn_again(
    procs: Procs, store: stead.Store, db_url: str,
) -> None:
    """CrewAI's native OpenAI client, streamed, journaled at its transport:
    killed while it waits for the approval and right after the refund went
    out, each turn is asked once and the refund sent once."""
    procs.app = "tests.workers.crewai_native:app"
    info = await stead.Client(store).start("refund_order_native", "123", version=1)
    await _approve(procs, store, info.run_id, db_url)
    await _killed_after_sending(procs, store, info.run_id)
    client = stead.Client(store)
    assert await client.result(info.run_id) == "Refunded order 123: rf_123."
    assert crewai_app.lines("model.log") == ["asked (streamed)"] * 3  # each turn asked once
    assert crewai_app.lines("ledger.log") == ["123 4200 refund-123"]  # sent once, its key
    answers = [stead.Completion.from_json(json.loads(r.payload))
               for r in await client.journal(info.run_id) if r.kind == "llm"]
    streamed = [a for a in answers if (a.raw or {})["http"]["status"] == 200]
    assert [a.provider for a in streamed] == ["openai"] * 3
    assert "event-stream" in streamed[0].raw["http"]["headers"]["content-type"]


async def test_a_flow_killed_while_waiting_for_feedback_runs_each_method_once(
    procs: Procs, store: stead.Store, db_url: str,
) -> None:
    info = await stead.Client(store).start("review", version=1)
    first = procs.start("--stay")

    async def waiting() -> bool:
        return await _waiting(store, info.run_id)

    await wait_until("the flow to wait for feedback", waiting, DEADLINE)
    first.kill()
    assert await procs.exit_code(first) == KILLED
    [w] = await stead.Client(store).waits(run_id=info.run_id)
    assert json.loads(w.request or "{}")["message"] == "Approve this refund?"
    answer = ("approve", info.run_id, "--wait", w.wait_id,
              "--payload", json.dumps({"feedback": "ok by Ann"}))
    ok = stead_cli(db_url, *answer)
    assert ok.returncode == 0 and ok.stdout.startswith("Accepted"), ok.stdout + ok.stderr
    await procs.finish(store, info.run_id)
    result = await stead.Client(store).result(info.run_id)
    assert result == {"plan": "refund 4200", "feedback": "ok by Ann"}
    assert crewai_app.lines("nodes.log") == ["plan", "review", "act"]  # each ran once
