"""The order-123 story (the demo's), with real processes: order 123 waits for the
user's confirmation, the worker dies, the approval arrives while no worker
runs, a new worker wakes exactly that run at that wait, once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import stead
from tests import stress
from tests.outside import Payments

# Process-level, crash or long property tests: `pytest --full` (CI) runs them.
pytestmark = pytest.mark.slow

WORKERS = Path(__file__).with_name("workers")
DEADLINE = 30.0 * stress.slow()  # scaled to the machine's load (tests/stress.py)


def _spawn(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, *args], stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


async def _until(what: str, check, timeout: float = DEADLINE) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_order_123_approval_during_a_deploy(db_url: str, tmp_path: Path) -> None:
    store = await stead.open_store(db_url)
    client = stead.Client(store)
    info = await client.start("refund_order", "123", 4200, version=1, task_id="order-123")
    link = tmp_path / "link.json"
    worker_log = tmp_path / "workers.log"
    worker = [str(WORKERS / "order_worker.py"), "--db", db_url, "--dir", str(tmp_path)]
    try:
        first = _spawn(*worker, log=worker_log)

        async def suspended() -> bool:
            return link.exists() and (await client.get(info.run_id)).status == "waiting"

        await _until("the run to wait for the user", suspended)
        first.send_signal(signal.SIGKILL)  # the deploy
        first.wait()
        facts = await client.task_state("order-123")
        assert facts.data == {"status": "awaiting_user_confirmation", "refund_dispatched": False}
        sent = json.loads(link.read_text())

        # The user approves while no worker is alive; the queue redelivers it 8 times
        # at once, and 8 other copies come with fresh event ids.
        go = tmp_path / "go"
        deliverers = [
            _spawn(str(WORKERS / "deliver.py"), "--db", db_url, "--run", info.run_id,
                   "--wait", sent["wait_id"], "--token", sent["token"],
                   "--event-id", "approval-1" if i < 8 else f"copy-{i}", "--go", str(go),
                   log=tmp_path / f"deliver-{i}.log")
            for i in range(16)
        ]
        time.sleep(0.5)  # let them start and park at the barrier
        go.touch()
        verdicts = []
        for i, proc in enumerate(deliverers):
            assert proc.wait(timeout=DEADLINE) == 0, (tmp_path / f"deliver-{i}.log").read_text()
            last = (tmp_path / f"deliver-{i}.log").read_text().strip().splitlines()[-1]
            verdicts.append(json.loads(last))
        names = [v["verdict"] for v in verdicts]
        assert names.count("Accepted") == 1
        # One of all 16 won the wait. If it was the redelivered event, its 7 other
        # deliveries are duplicates of it; if a copy won, each of the 8 was judged
        # and rejected (a rejected event is judged again when redelivered, never a
        # duplicate). Each copy with its own id was judged.
        if "Accepted" in names[:8]:
            assert sorted(names[:8]) == ["Accepted"] + ["Duplicate"] * 7
        else:
            assert names[:8] == ["Rejected"] * 8
        assert "Duplicate" not in names[8:]
        assert all(v["reason"] in (None, "already_consumed") for v in verdicts)
        assert (await client.get(info.run_id)).status == "running"  # woken, unclaimed

        second = _spawn(*worker, log=worker_log)

        async def done() -> bool:
            return (await client.get(info.run_id)).done

        await _until("the new worker to finish the run", done)
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=DEADLINE) == 0

        result = await client.result(info.run_id)
        assert result["refunded"] is True
        winner = names.index("Accepted")
        again = await client.deliver(info.run_id, wait_id=sent["wait_id"],
                                     event_id="approval-1" if winner < 8 else f"copy-{winner}",
                                     token=sent["token"], payload={"approved": True},
                                     bind={"order_id": "123", "amount": 4200,
                                           "state_version": 1})
        assert isinstance(again, stead.Duplicate)

        payments = Payments(tmp_path / "payments.json")
        assert len(payments.refunds()) == 1  # the refund went out once
        assert (tmp_path / "model.log").read_text().count("asked") == 1  # reused, not re-asked
        assert (tmp_path / "eligibility.log").read_text().splitlines() == ["123", "123"]
        facts = await client.task_state("order-123")
        assert facts.data == {"status": "refunded", "refund_dispatched": True}
        events = await client.events(info.run_id)
        assert len(events) == 9  # every delivery stored: 1 accepted + 8 rejected copies
        resumes = await client.resumes(info.run_id)
        assert resumes and resumes[-1].reused > 0
    finally:
        for proc in locals().get("deliverers", []):
            if proc.poll() is None:
                proc.kill()
        for name in ("first", "second"):
            proc = locals().get(name)
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        await store.close()
