"""A worker process SIGKILLed mid-model-call leaves the call's reservation
counted (the tenant's reserved tokens) until the run's next holder meets the
call again and counts the dead attempt at its estimate; the answered attempts
settle to their usage, and a replayed call is never counted again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import stead
from stead.spend import ReservationState
from tests.workers.procs import DEADLINE, KILLED, check_journal, wait_until

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("workers") / "spend_worker.py"
ROOT = Path(__file__).parent.parent
# Each call is estimated at 10 input tokens (its messages are 38 characters of
# JSON) and max_tokens=100; it answers 30 + 70.
ESTIMATE = 10 + 100
USED = 100


def _start(db_url: str, tmp: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), "--db", db_url, "--dir", str(tmp)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)


def _ledger(tmp: Path) -> list[str]:
    path = tmp / "model.log"
    return path.read_text().splitlines() if path.exists() else []


def _finish(proc: subprocess.Popen[bytes]) -> int:
    out, _ = proc.communicate(timeout=DEADLINE)
    assert proc.returncode in (0, KILLED), out.decode(errors="replace")[-3000:]
    return proc.returncode


async def test_a_reservation_killed_mid_call_stays_counted_until_resolved(
        db_url: str, tmp_path: Path) -> None:
    from tests.workers.spend_worker import app

    store = await stead.open_store(db_url)
    try:
        client = stead.Client(store, app)
        await client.set_tenant_limits("acme", tokens=10_000, by="ops", why="test")
        info = await client.start("talk", tenant="acme")

        # 1. The first call is in flight (the ledger has it, the gate is shut): kill.
        first = _start(db_url, tmp_path)
        await wait_until("the first call sent", lambda: len(_ledger(tmp_path)) == 1)
        held = await store.reservations(info.run_id)
        assert [(r["addr"], r["attempt"], r["state"]) for r in held] == [
            ("0", 1, ReservationState.RESERVED)]
        first.kill()
        assert _finish(first) == KILLED
        # Nothing knows the outcome: the reservation is still counted.
        spend = await store.tenant_spend("acme")
        assert (spend["tokens"], spend["reserved_tokens"]) == (0, ESTIMATE)
        assert [r["state"] for r in await store.reservations(info.run_id)] == [
            ReservationState.RESERVED]

        # 2. A new worker takes the run over: the dead attempt counts at its
        # estimate, the new one settles to its usage; then it dies after it.
        (tmp_path / "gate").touch()
        (tmp_path / "kill-after").touch()
        assert _finish(_start(db_url, tmp_path)) == KILLED
        assert _ledger(tmp_path) == ["first", "first"]
        held = await store.reservations(info.run_id)
        assert [(r["addr"], r["attempt"], r["state"], r["tokens"]) for r in held] == [
            ("0", 1, ReservationState.DIED, ESTIMATE), ("0", 2, ReservationState.SETTLED, USED)]
        spend = await store.tenant_spend("acme")
        assert (spend["tokens"], spend["reserved_tokens"]) == (ESTIMATE + USED, 0)

        # 3. The next worker replays the first call (nothing reserved, nothing
        # sent) and asks the second.
        assert _finish(_start(db_url, tmp_path)) == 0
        assert await client.result(info.run_id, timeout=DEADLINE) == [
            "answer to first", "answer to second"]
        assert _ledger(tmp_path) == ["first", "first", "second"]
        held = await store.reservations(info.run_id)
        assert len(held) == 3 and held[-1]["state"] == ReservationState.SETTLED
        spend = await store.tenant_spend("acme")
        assert (spend["tokens"], spend["reserved_tokens"]) == (ESTIMATE + 2 * USED, 0)
        check_journal(await client.journal(info.run_id))
    finally:
        await store.close()
