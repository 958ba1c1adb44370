"""An agent asking its model through `stead.llm.LiteLLM` in real worker
processes, SIGKILLed mid-tool, while it waits for a person's approval, and
right after its refund went out: LiteLLM's log of the requests it sent
(model.log) shows each turn asked once over every process, and the payment
service's ledger one refund."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import stead
from stead.records import RecordKind
from tests.test_contrib_processes import DEADLINE, Procs, _finish, _stead
from tests.workers import agents_app
from tests.workers.procs import KILLED, wait_until

pytestmark = pytest.mark.slow
APP = "tests.workers.litellm_app:app"
TURNS = ["asked gpt-4o-mini"] * 3


@pytest.fixture
def procs(sdk_dir: Path, db_url: str) -> Procs:
    return Procs(sdk_dir, db_url)


async def _waiting(store: stead.Store, run_id: str) -> bool:
    return (await store.get_run(run_id)).status == "waiting"


async def _approve(procs: Procs, store: stead.Store, run_id: str, db_url: str) -> None:
    """Run until the approval is asked, kill the worker, approve from the CLI."""
    first = procs.start(APP, "--stay")

    async def asked() -> bool:
        return (procs.tmp / "approval.json").exists() and await _waiting(store, run_id)

    await wait_until("the run to wait for its approval", asked, DEADLINE)
    first.kill()  # a crash while the run waits
    assert await procs.exit_code(first) == KILLED
    request = json.loads((procs.tmp / "approval.json").read_text())
    assert request["arguments"] == {"order_id": "123", "amount": 4200}
    token = procs.tmp / "token"
    token.write_text(request["token"])
    ok = _stead(db_url, "approve", run_id, "--wait", request["wait_id"],
                "--token-file", str(token))
    assert ok.returncode == 0 and ok.stdout.startswith("Accepted"), ok.stdout + ok.stderr
    again = _stead(db_url, "approve", run_id, "--wait", request["wait_id"],
                   "--token-file", str(token))
    assert again.returncode == 0 and again.stdout.startswith("Duplicate"), again.stdout


async def _check_done(store: stead.Store, run_id: str) -> None:
    client = stead.Client(store)
    assert await client.result(run_id) == "Refunded 4200 on order 123."
    assert agents_app.lines("model.log") == TURNS  # no turn asked twice, over every process
    [sent] = agents_app.lines("ledger.log")  # the refund went out once
    assert sent.startswith("123 4200 ")
    journal = await client.journal(run_id)
    assert [r.seq for r in journal] == list(range(len(journal)))
    outcomes = [(r.addr, r.attempt) for r in journal if r.status in ("ok", "error")]
    assert len(outcomes) == len(set(outcomes)), outcomes  # each call's outcome journaled once
    llm = [r for r in journal if r.kind == RecordKind.LLM]
    assert [r.name for r in llm] == ["turn-1", "turn-2", "turn-3"]
    for record in llm:
        completion = stead.Completion.from_json(json.loads(record.payload))
        assert completion.provider == "litellm" and completion.usage.output_tokens == 20


async def test_killed_mid_tool_the_model_is_not_asked_again(
    procs: Procs, store: stead.Store, db_url: str,
) -> None:
    info = await stead.Client(store).start("refund_order", "123", version=1)
    (procs.tmp / "die-in-tool").touch()
    first = procs.start(APP)
    assert await procs.exit_code(first) == KILLED, procs.output()
    assert agents_app.lines("model.log") == TURNS[:1]
    await _approve(procs, store, info.run_id, db_url)
    await _finish(procs, store, APP, info.run_id)
    # The tool died before its result was journaled: it ran again, once.
    assert agents_app.lines("tools.log") == ["lookup 123", "lookup 123"]
    await _check_done(store, info.run_id)


async def test_approved_from_the_cli_while_no_worker_lives_the_refund_goes_out_once(
    procs: Procs, store: stead.Store, db_url: str,
) -> None:
    info = await stead.Client(store).start("refund_order", "123", version=1)
    await _approve(procs, store, info.run_id, db_url)
    assert agents_app.lines("model.log") == TURNS[:2]
    assert not agents_app.lines("ledger.log")  # nothing sent before the approval
    await _finish(procs, store, APP, info.run_id)
    assert agents_app.lines("tools.log") == ["lookup 123"]
    await _check_done(store, info.run_id)


async def test_killed_right_after_the_refund_its_check_says_it_went_out(
    procs: Procs, store: stead.Store, db_url: str,
) -> None:
    info = await stead.Client(store).start("refund_order", "123", version=1)
    await _approve(procs, store, info.run_id, db_url)
    (procs.tmp / "die-after-sending").touch()
    dying = procs.start(APP)
    assert await procs.exit_code(dying) == KILLED, procs.output()
    assert len(agents_app.lines("ledger.log")) == 1
    await _finish(procs, store, APP, info.run_id)
    await _check_done(store, info.run_id)  # the check found it: not sent again
    [record] = [r for r in await stead.Client(store).journal(info.run_id)
                if r.name == "refund" and r.status == "ok"]
    assert json.loads(record.payload)["result"] == {"refund": "rf_123"}  # as the check said
