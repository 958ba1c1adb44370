"""stead.contrib.strands and stead.contrib.google_adk against real worker
processes (SIGKILL), the same agents in each SDK (tests/workers/strands_app.py,
tests/workers/adk_app.py): killed while a tool runs, a fresh worker finishes
the agent without asking the model again for a recorded turn or running a
recorded tool again; killed while the run waits for an approval, `stead
approve` answers it with no worker alive and the approved tool runs once;
killed right after a refund went out, an idempotent effect is resent under its
key and one that is not stops for a person."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import stead
from stead.records import ResumeClass
from tests.test_contrib_processes import DEADLINE, Procs, kept_once
from tests.workers import agents_app
from tests.workers.procs import KILLED, wait_until

pytestmark = pytest.mark.slow
# Each SDK's worker app, and the module and distribution that bring it (installed
# beside the dev set: their pins clash with it, see pyproject.toml's extras).
APPS = {
    "strands": ("tests.workers.strands_app:app", "strands", "strands-agents"),
    "google_adk": ("tests.workers.adk_app:app", "google.adk", "google-adk"),
}


@pytest.fixture(params=list(APPS))
def app(request: pytest.FixtureRequest) -> str:
    """The worker app under test, of one SDK."""
    name, module, distribution = APPS[request.param]
    pytest.importorskip(module, reason=f"{distribution} is installed beside the dev set: "
                        "pip install --no-deps -r .ci/beside-dev.txt")
    return name


@pytest.fixture
def procs(sdk_dir: Path, db_url: str) -> Procs:
    return Procs(sdk_dir, db_url)


def stead_cli(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A `stead` command as a person runs it: a process of its own."""
    return subprocess.run([sys.executable, "-m", "stead", "--db", db_url, *args],
                          capture_output=True, text=True, timeout=DEADLINE)


async def _waiting(store: stead.Store, run_id: str) -> bool:
    return (await store.get_run(run_id)).status == "waiting"


async def test_killed_mid_tool_a_fresh_worker_asks_and_runs_nothing_recorded_again(
    procs: Procs, store: stead.Store, app: str,
) -> None:
    client = stead.Client(store)
    info = await client.start("weather", "Paris", version=1)
    try:
        # dies as forecast's result commits, temperature still running
        first = procs.start(app, "--crash", "after:1:forecast")
        assert await procs.exit_code(first) == KILLED, procs.output()
        journal = [r.name for r in await store.load_journal(info.run_id)
                   if r.status != stead.records.RecordStatus.STARTED]
        assert journal == ["model scripted", "forecast"]
        assert agents_app.lines("model.log") == ["asked"]

        fresh = procs.start(app)
        assert await procs.exit_code(fresh) == 0, procs.output()
        assert await client.result(info.run_id) == "Paris: 12C / Paris: rain"
        assert agents_app.lines("model.log") == ["asked", "asked"]  # the first turn not re-asked
        ran = agents_app.lines("tools.log")
        assert ran.count("forecast") == 1  # recorded: not run again
        assert ran.count("temperature") == 1  # in flight at the kill: finished once, after it
        [resume] = await client.resumes(info.run_id)
        assert resume.epoch == 2 and resume.details.classes["reuse"] == 2
        await kept_once(store, info.run_id)
    finally:
        procs.stop_all()


async def test_an_approval_through_the_cli_while_no_worker_lives_runs_the_tool_once(
    procs: Procs, store: stead.Store, sdk_dir: Path, db_url: str, app: str,
) -> None:
    info = await stead.Client(store).start("refund_order", "123", version=1)
    try:
        first = procs.start(app, "--stay")

        async def asked() -> bool:
            return (sdk_dir / "approval.json").exists() and await _waiting(store, info.run_id)

        await wait_until("the run to wait for its approval", asked, DEADLINE)
        first.kill()  # a crash while the run waits
        assert await procs.exit_code(first) == KILLED
        request = json.loads((sdk_dir / "approval.json").read_text())
        token = sdk_dir / "token"
        token.write_text(request["token"])
        approve = ("approve", info.run_id, "--wait", request["wait_id"], "--token-file",
                   str(token))
        ok = stead_cli(db_url, *approve)
        assert ok.returncode == 0 and ok.stdout.lower().startswith("accepted"), \
            ok.stdout + ok.stderr

        fresh = procs.start(app)
        assert await procs.exit_code(fresh) == 0, procs.output()
        again = stead_cli(db_url, *approve)
        assert again.returncode == 0 and again.stdout.lower().startswith("duplicate"), \
            again.stdout
        assert await stead.Client(store).result(info.run_id) == \
            "done: refunded 4200 on order 123"
        [sent] = agents_app.lines("ledger.log")  # the approved tool ran exactly once
        assert sent.startswith("123 4200 ")
        assert agents_app.lines("model.log") == ["asked", "asked"]
    finally:
        procs.stop_all()


@pytest.mark.parametrize("idempotent", [True, False])
async def test_an_effect_tool_killed_right_after_sending_is_never_silently_repeated(
    procs: Procs, store: stead.Store, sdk_dir: Path, idempotent: bool, app: str,
) -> None:
    """Killed between the refund going out and its outcome being journaled: its
    intent was journaled first, so the takeover knows it may have gone out. An
    idempotent effect is resent under the same key; one that is not stops the
    run for a person (`stead reconcile`), nothing sent again."""
    client = stead.Client(store)
    info = await client.start("refund_order", "123", False, idempotent, version=1)
    try:
        first = procs.start(app)  # stops once the run waits for its approval
        assert await procs.exit_code(first) == 0, procs.output()
        [w] = await client.waits(run_id=info.run_id)
        (sdk_dir / "die-after-sending").touch()
        assert isinstance(await client.deliver(info.run_id, wait_id=w.wait_id, event_id="e1",
                                               payload={"approved": True},
                                               bind=json.loads(w.bind)), stead.Accepted)
        dying = procs.start(app)
        assert await procs.exit_code(dying) == KILLED, procs.output()
        fresh = procs.start(app)
        assert await procs.exit_code(fresh) == 0, procs.output()
        sent = agents_app.lines("ledger.log")
        if idempotent:
            assert await client.result(info.run_id) == "done: refunded 4200 on order 123"
            assert len(sent) == 2 and sent[0] == sent[1]  # resent once, under the same key
            last = (await client.resumes(info.run_id))[-1]
            assert last.details.classes[ResumeClass.OUTCOME_UNKNOWN] == 1
        else:
            assert (await client.get(info.run_id)).status == "outcome_unknown"
            assert len(sent) == 1  # not sent again: `stead reconcile` decides
        assert agents_app.lines("model.log") == ["asked", "asked"] if idempotent else \
            agents_app.lines("model.log") == ["asked"]
    finally:
        procs.stop_all()
