"""The SDK integrations (stead.contrib) against real worker processes: an agent
with two tool calls is SIGKILLed after the first tool result, and a fresh
worker finishes it without asking the model again for a recorded turn or
running a recorded tool again; an approval given with `stead approve` while no
worker is alive runs the approved tool exactly once."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import stead
from stead.conversations import transcript
from stead.records import ResumeClass
from tests import stress
from tests.workers import agents_app
from tests.workers.procs import KILLED, wait_until

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parent / "workers" / "sdk_worker.py"
DEADLINE = 60.0 * stress.slow()  # scaled to the machine's load (tests/stress.py)


class Procs:
    """Worker processes sharing the test's database and $SDK_DIR."""

    def __init__(self, tmp: Path, db_url: str) -> None:
        self.tmp, self.db_url = tmp, db_url
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, app: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"worker-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--db", self.db_url, "--app", app, *args],
            stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "SDK_DIR": str(self.tmp), "PYTHONUNBUFFERED": "1",
                 "OPENAI_AGENTS_DISABLE_TRACING": "1"})
        log.close()
        self.procs.append(proc)
        return proc

    def output(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:]
                         for p in sorted(self.tmp.glob("worker-*.log")))

    async def exit_code(self, proc: subprocess.Popen[bytes]) -> int:
        await wait_until("the worker to exit", lambda: proc.poll() is not None, DEADLINE)
        return proc.returncode

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def procs(sdk_dir: Path, db_url: str) -> Iterator[Procs]:
    p = Procs(sdk_dir, db_url)
    yield p
    p.stop_all()


def _stead(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("stead")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "stead"]
    return subprocess.run([*cmd, "--db", db_url, *args], capture_output=True, text=True,
                          timeout=DEADLINE)


async def kept_once(store: stead.Store, run_id: str) -> None:
    """The weather agent's two model calls, its worker killed between them:
    the second sent the first's messages and three more (the assistant's
    tool calls, their results), and each message is stored once."""
    first, second = await transcript.read(store, run_id)
    assert [first.kept, second.kept] == [transcript.Kept.YES] * 2
    assert (second.earlier, second.sent) == (first.sent, first.sent + 3)
    assert len(await store.conversation_parts(run_id)) == second.sent + 1  # and the params


async def _finish(procs: Procs, store: stead.Store, app: str, run_id: str) -> None:
    fresh = procs.start(app)
    assert await procs.exit_code(fresh) == 0, procs.output()
    assert (await store.get_run(run_id)).status == "completed", procs.output()


@dataclasses.dataclass(frozen=True)
class Sdk:
    app: str
    model: str  # the name of a model request's record
    forecast: str  # the name of the first tool result's record
    approval: dict[str, object]  # the payload approving the refund call


SDKS = {
    "openai_agents": Sdk("tests.workers.agents_app:app", "model ScriptedModel", "forecast", {}),
    "pydantic_ai": Sdk("tests.workers.pydantic_app:app", "weather__model.request",
                       "forecast",
                       {"approvals": {"call_refund": True}}),
}


@pytest.fixture(params=list(SDKS))
def sdk(request: pytest.FixtureRequest) -> Sdk:
    return SDKS[request.param]


async def test_killed_after_the_first_tool_result_resumes_without_rerunning(
    procs: Procs, store: stead.Store, sdk: Sdk,
) -> None:
    info = await stead.Client(store).start("weather", "Paris", version=1)
    first = procs.start(sdk.app, "--crash", f"after:1:{sdk.forecast}")
    assert await procs.exit_code(first) == KILLED, procs.output()
    journal = [r.name for r in await store.load_journal(info.run_id)
               if r.status != stead.records.RecordStatus.STARTED]
    assert journal == [sdk.model, sdk.forecast]
    assert agents_app.lines("model.log") == ["asked"]

    await _finish(procs, store, sdk.app, info.run_id)
    client = stead.Client(store)
    assert await client.result(info.run_id) == "Paris: 12C / Paris: rain"
    assert agents_app.lines("model.log") == ["asked", "asked"]  # the first turn not re-asked
    ran = agents_app.lines("tools.log")
    assert ran.count("forecast") == 1  # recorded: not run again
    assert ran.count("temperature") == 1  # in flight at the kill: finished once, after it
    [resume] = await client.resumes(info.run_id)
    # the two results are reused (the records count also temperature's started marker,
    # if the forecast's commit carried it)
    assert resume.epoch == 2 and resume.details.classes == {"reuse": 2}
    await kept_once(store, info.run_id)


async def test_an_approval_through_the_cli_while_no_worker_lives_runs_the_tool_once(
    procs: Procs, store: stead.Store, tmp_path: Path, db_url: str, sdk: Sdk,
) -> None:
    info = await stead.Client(store).start("refund_order", "123", version=1)
    first = procs.start(sdk.app, "--stay")
    asked_file = tmp_path / "approval.json"

    async def waiting() -> bool:
        return asked_file.exists() and (await store.get_run(info.run_id)).status == "waiting"

    await wait_until("the run to wait for its approval", waiting, DEADLINE)
    first.kill()  # a crash while the run waits
    assert await procs.exit_code(first) == KILLED
    token = tmp_path / "token"
    token.write_text(json.loads(asked_file.read_text())["token"])
    [w] = await stead.Client(store).waits(run_id=info.run_id)
    approve = ("approve", info.run_id, "--wait", w.wait_id, "--token-file", str(token),
               "--payload", json.dumps(sdk.approval))
    ok = _stead(db_url, *approve)
    assert ok.returncode == 0 and ok.stdout.startswith("Accepted"), ok.stdout + ok.stderr

    await _finish(procs, store, sdk.app, info.run_id)
    again = _stead(db_url, *approve)
    assert again.returncode == 0 and again.stdout.startswith("Duplicate"), again.stdout
    assert await stead.Client(store).result(info.run_id) == "done: refunded 4200 on order 123"
    [sent] = agents_app.lines("ledger.log")  # the approved tool ran exactly once
    assert sent.startswith("123 4200")
    assert agents_app.lines("model.log") == ["asked", "asked"]


async def test_an_effect_tool_killed_after_sending_is_resent_with_the_same_key(
    procs: Procs, store: stead.Store, sdk_dir: Path,
) -> None:
    """The refund is an `effect_tool(idempotent=True)`: its intent is journaled
    before it runs, so after a kill between the send and its outcome the
    takeover knows it may have gone out and resends it under the same key."""
    app = SDKS["openai_agents"].app
    client = stead.Client(store)
    info = await client.start("refund_order", "123", None, False, version=1)
    first = procs.start(app, "--stay")

    async def waiting() -> bool:
        return (await store.get_run(info.run_id)).status == "waiting"

    await wait_until("the run to wait for its approval", waiting, DEADLINE)
    first.kill()
    assert await procs.exit_code(first) == KILLED
    [w] = await client.waits(run_id=info.run_id)
    (sdk_dir / "die-after-sending").touch()
    assert isinstance(await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1",
                                           payload={"approved": True},
                                           bind=json.loads(w.bind)), stead.Accepted)
    dying = procs.start(app)
    assert await procs.exit_code(dying) == KILLED, procs.output()
    await _finish(procs, store, app, info.run_id)
    assert await client.result(info.run_id) == "done: refunded 4200 on order 123"
    sent = agents_app.lines("ledger.log")
    assert len(sent) == 2 and sent[0] == sent[1]  # resent once, under the same key
    last = (await client.resumes(info.run_id))[-1]
    assert last.details.classes[ResumeClass.OUTCOME_UNKNOWN] == 1  # known as possibly sent
