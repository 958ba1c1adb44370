"""Effects across real process kills: a worker process is SIGKILLed at each
point of an effect's life, a fresh worker process takes the run over, and the
outside world's own ledger (tests/outside.py) says what really happened.

Kill points (journal writes of the effect, counted by `CrashPoint(name=...)`):

- before the intent commits: nothing was sent, and the journal says so;
- after the intent commits, before the function is called: nothing was sent,
  but the journal cannot prove it;
- after the function ran, before the outcome commits: it was sent, and the
  journal cannot prove it;
- after `op.accepted(external_id)` commits: it was sent and the journal says
  the outside accepted it.

Services: the payment service honours idempotency keys (effect declared
`idempotent=True`); the same service asked by key (`check=`, not idempotent);
mail, which can neither be resent safely nor asked. What must hold:

- the outside shows at most one real effect at every moment, exactly one in the end;
- where the service honours keys, every call carries the effect's one key;
- where nothing can be proved, the run stops as `outcome_unknown`, names the
  effect, its key and its arguments, holds no worker and is not claimed again
  while a worker polls; a human's decision then resumes it correctly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import stead
from tests.outside import CI, Mail, Payments
from tests.workers.procs import DEADLINE, KILLED, wait_until

# Process-level, crash or long property tests: `pytest --full` (CI) runs them.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).with_name("workers") / "effects_worker.py"
# The worker that dies holds a short lease, so the takeover comes soon; the
# fresh worker a long one, so it never loses its own lease on a slow machine.
DYING_LEASE = "0.5"
FRESH_LEASE = "5"


@dataclasses.dataclass
class Workers:
    """Worker processes of one test, and the files they share with it."""

    tmp: Path
    db_url: str
    procs: list[tuple[subprocess.Popen[bytes], Path]] = dataclasses.field(default_factory=list)

    @property
    def events(self) -> Path:
        return self.tmp / "events.log"

    def start(self, *args: str, lease: str = FRESH_LEASE) -> subprocess.Popen[bytes]:
        log = self.tmp / f"worker-{len(self.procs)}.log"
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(SCRIPT), "--db", self.db_url, "--outside", str(self.tmp),
                 "--events", str(self.events), "--lease", lease, *args],
                stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path},
            )
        self.procs.append((proc, log))
        return proc

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        log = next(log for p, log in self.procs if p is proc)
        return log.read_text(errors="replace")[-4000:]

    async def exit_code(self, proc: subprocess.Popen[bytes]) -> int:
        deadline = time.monotonic() + DEADLINE
        while (code := proc.poll()) is None:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise AssertionError(f"worker did not exit in {DEADLINE}s:\n"
                                     f"{self.output(proc)}")
            await asyncio.sleep(0.02)
        return code

    async def stop(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM: a graceful stop, exit 0."""
        proc.send_signal(signal.SIGTERM)
        assert await self.exit_code(proc) == 0, self.output(proc)

    def claims(self) -> list[str]:
        """What each claim of any worker returned: run ids, or "-" for none."""
        if not self.events.exists():
            return []
        return [line.split(" ", 1)[1] for line in self.events.read_text().splitlines()
                if line.startswith("claim ")]

    def stop_all(self) -> None:
        for proc, _log in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def workers(tmp_path: Path, db_url: str) -> Iterator[Workers]:
    w = Workers(tmp_path, db_url)
    yield w
    w.stop_all()


@pytest.fixture
async def client(store: stead.Store) -> AsyncIterator[stead.Client]:
    yield stead.Client(store)


def _effect(journal: list[stead.Record], name: str) -> list[stead.Record]:
    return [r for r in journal if r.kind == "effect" and r.name == name]


def _phases(journal: list[stead.Record], name: str) -> list[str]:
    return [r.status for r in _effect(journal, name)]


def _payload(rec: stead.Record) -> Any:
    return json.loads(rec.payload)


async def _settled(client: stead.Client, run_id: str, *statuses: str) -> stead.RunInfo:
    """Poll until the run has one of `statuses`; fail on any other end."""
    found: list[stead.RunInfo] = []

    async def reached() -> bool:
        info = await client.get(run_id)
        assert info.status not in {"failed", "cancelled", "incompatible_checkpoint"} - set(
            statuses), info
        found[:] = [info]
        return info.status in statuses

    await wait_until(f"run {run_id} to be {' or '.join(statuses)}", reached)
    return found[0]


# -- the matrix: every kill point, every kind of service -------------------------------
BEFORE_INTENT = "before-the-intent-commits"
AFTER_INTENT = "after-the-intent-commits"
BEFORE_OUTCOME = "after-the-send-before-the-outcome-commits"
AFTER_ACCEPTED = "after-accepted-commits"

KILLS = {  # kill point -> (--crash, the effect's phases journaled when the worker died)
    BEFORE_INTENT: ("before:1", []),
    AFTER_INTENT: ("after:1", ["intent"]),
    BEFORE_OUTCOME: ("before:2", ["intent"]),
    AFTER_ACCEPTED: ("after:2", ["intent", "accepted"]),
}
SENT_AT_KILL = {BEFORE_INTENT: 0, AFTER_INTENT: 0, BEFORE_OUTCOME: 1, AFTER_ACCEPTED: 1}

IDEMPOTENT = "payment-idempotent"
CHECKED = "payment-checked"
MAIL = "mail"
SERVICES = {IDEMPOTENT: ("refund_idempotent", "refund"),
            CHECKED: ("refund_checked", "refund"),
            MAIL: ("mail", "send_mail")}


@dataclasses.dataclass(frozen=True)
class Expect:
    cls: str  # how the takeover classified the effect (docs/architecture.md §4)
    phases: tuple[str, ...]  # the effect's journal records in the end
    decision: str | None = None  # the run stops as outcome_unknown; a human decides this
    sends: int = 1  # send calls the service received in all (a resend included)


EXPECT = {
    (IDEMPOTENT, BEFORE_INTENT): Expect("not_started", ("intent", "ok")),
    (IDEMPOTENT, AFTER_INTENT): Expect("outcome_unknown", ("intent", "intent", "ok")),
    # Resent with the same key: two calls, one refund.
    (IDEMPOTENT, BEFORE_OUTCOME): Expect("outcome_unknown", ("intent", "intent", "ok"), sends=2),
    # Accepted outside and no check to ask: never resubmitted, so a human decides.
    (IDEMPOTENT, AFTER_ACCEPTED): Expect(
        "pending_external", ("intent", "accepted", "reconciled"), decision="happened"
    ),
    (CHECKED, BEFORE_INTENT): Expect("not_started", ("intent", "ok")),
    # The check says not found: sent (once).
    (CHECKED, AFTER_INTENT): Expect("outcome_unknown", ("intent", "intent", "ok")),
    # The check finds the refund: recorded, not resent.
    (CHECKED, BEFORE_OUTCOME): Expect("outcome_unknown", ("intent", "ok")),
    (CHECKED, AFTER_ACCEPTED): Expect("pending_external", ("intent", "accepted", "ok")),
    (MAIL, BEFORE_INTENT): Expect("not_started", ("intent", "ok")),
    # Nothing can be proved: a human finds no mail went out and says send it.
    (MAIL, AFTER_INTENT): Expect(
        "outcome_unknown", ("intent", "reconciled", "intent", "ok"), decision="not_happened"
    ),
    # Nothing can be proved: a human finds the mail in the outbox.
    (MAIL, BEFORE_OUTCOME): Expect(
        "outcome_unknown", ("intent", "reconciled"), decision="happened"
    ),
    (MAIL, AFTER_ACCEPTED): Expect(
        "pending_external", ("intent", "accepted", "reconciled"), decision="happened"
    ),
}


class Outside:
    """The test's view of the services the worker processes reach."""

    def __init__(self, folder: Path) -> None:
        self.payments = Payments(folder / "payments.json")
        self.mail = Mail(folder / "mail.json")

    def real(self, service: str) -> list[dict[str, Any]]:
        """The effects that really took place outside, whatever the journal says."""
        if service == MAIL:
            return [{"message_id": m["id"]} for m in self.mail.sent()]
        return self.payments.refunds()

    def sends(self, service: str) -> list[dict[str, Any]]:
        """Every send call the service received."""
        return self.mail.sent() if service == MAIL else self.payments.calls("refund")


@pytest.mark.slow
@pytest.mark.parametrize(("service", "kill"), list(EXPECT), ids=[f"{s}-{k}" for s, k in EXPECT])
async def test_a_killed_effect_is_never_silently_repeated(
    workers: Workers, store: stead.Store, client: stead.Client, tmp_path: Path,
    service: str, kill: str,
) -> None:
    workflow, name = SERVICES[service]
    crash, phases_at_kill = KILLS[kill]
    expect = EXPECT[service, kill]
    outside = Outside(tmp_path)
    accept = kill == AFTER_ACCEPTED
    args: list[Any] = (["order-123", "ada@example.com", accept] if service == MAIL
                       else ["order-123", 4200, accept])
    run_id = (await client.start(workflow, *args, version=1)).run_id
    key = f"{run_id}:1"  # derived from the run and the effect's position (after one step)

    # 1. The worker process dies at the kill point.
    crashed = workers.start("--crash", f"{crash}:{name}", "--until-done", lease=DYING_LEASE)
    assert await workers.exit_code(crashed) == KILLED, workers.output(crashed)
    at_kill = await store.load_journal(run_id)
    assert _phases(at_kill, name) == phases_at_kill
    assert len(outside.real(service)) == SENT_AT_KILL[kill]
    assert (await client.get(run_id)).lease_owner is not None  # the dead worker's lease

    # 2. A fresh worker process takes the run over.
    fresh = workers.start()
    info = await _settled(client, run_id, "completed", "outcome_unknown")
    assert len(outside.real(service)) <= 1
    if expect.decision is None:
        assert info.status == "completed", info
    else:
        # Nothing can be proved: the run stops for a human, and says what is known.
        assert info.status == "outcome_unknown", info
        assert info.error is not None
        assert (info.error["effect"], info.error["key"]) == (name, key)
        sent_with = [args[1], "refund for order order-123"] if service == MAIL else args[:2]
        sent = dict(info.error["arguments"])
        assert len(sent.pop("names")) == len(sent_with)  # each named by its parameter
        assert sent == {"args": sent_with, "kwargs": {}}
        assert f"stead reconcile RUN {name}" in info.error["message"]
        if accept:
            sent = outside.real(service)[0]
            ext = sent["refund"] if service != MAIL else sent["message_id"]
            assert info.error["known"].startswith(f"accepted outside as {ext}")
        # It holds no worker, and a polling worker does not claim it again.
        assert info.lease_owner is None
        journal_at_stop = await store.load_journal(run_id)
        seen = len(workers.claims())
        await wait_until("three more claims", lambda: len(workers.claims()) >= seen + 3)
        assert run_id not in ",".join(workers.claims()[seen:])
        again = await client.get(run_id)
        assert (again.status, again.epoch, again.lease_owner) == ("outcome_unknown", 2, None)
        assert await store.load_journal(run_id) == journal_at_stop
        assert len(outside.real(service)) == SENT_AT_KILL[kill]  # nothing resent

        # A human looks at the outside and decides; the run continues from it.
        if expect.decision == "happened":
            [found] = outside.real(service)
            await client.reconcile(run_id, name, happened=found, by="alice",
                                   why="found it in the provider's dashboard")
        else:
            assert outside.real(service) == []
            await client.reconcile(run_id, name, not_happened=True, by="alice",
                                   why="not in the outbox")
        info = await _settled(client, run_id, "completed")
    await workers.stop(fresh)

    # The outside: exactly one real effect; every send carried the one key.
    [real] = outside.real(service)
    assert info.result is not None and info.result["effect"] == real
    assert len(outside.sends(service)) == expect.sends
    if service != MAIL:
        assert {c["key"] for c in outside.payments.calls()} == {key}
        lookups = outside.payments.calls("lookup")
        asked = service == CHECKED and expect.cls != "not_started"
        assert len(lookups) == (1 if asked else 0)

    # The journal: what had committed is unchanged; the effect's phases; one key.
    journal = await store.load_journal(run_id)
    assert [r.seq for r in journal] == list(range(len(journal)))
    assert journal[: len(at_kill)] == at_kill
    assert _phases(journal, name) == list(expect.phases)
    intents = [r for r in _effect(journal, name) if r.status == "intent"]
    assert {_payload(r)["key"] for r in intents} == {key}
    if expect.sends == 2:
        assert _payload(intents[-1])["resend"] is True
    if expect.decision is not None:
        [decided] = [r for r in journal if r.status == "reconciled"]
        assert _payload(decided)["decision"] == expect.decision
        assert _payload(decided)["by"] == "alice"

    # The takeover classified the effect; a decision led to one more takeover.
    resumes = await client.resumes(run_id)
    assert [r.epoch for r in resumes] == ([2] if expect.decision is None else [2, 4])
    assert json.loads(resumes[0].detail)["classes"] == {"reuse": 1, expect.cls: 1}
    if expect.decision is not None:
        assert json.loads(resumes[1].detail)["classes"] == {"reuse": 2}


# -- the coding agent whose worker vanished while CI ran ------------------------------
@pytest.mark.slow
async def test_a_ci_job_accepted_before_the_crash_is_polled_never_resubmitted(
    workers: Workers, store: stead.Store, client: stead.Client, tmp_path: Path
) -> None:
    ci = CI(tmp_path / "ci.json")
    run_id = (await client.start("coding_agent", "abc123", version=1)).run_id

    crashed = workers.start("--crash", "after:2:ci", "--until-done", lease=DYING_LEASE)
    assert await workers.exit_code(crashed) == KILLED, workers.output(crashed)
    at_kill = await store.load_journal(run_id)
    assert _phases(at_kill, "ci") == ["intent", "accepted"]
    assert _payload(_effect(at_kill, "ci")[-1]) == {"external_id": "471"}
    assert ci.jobs() == {471: "abc123"} and ci.polls() == []  # CI runs; nobody watches

    fresh = workers.start("--until-done")
    assert await workers.exit_code(fresh) == 0, workers.output(fresh)
    info = await client.get(run_id)
    assert info.status == "completed", info
    assert info.result == {"patch": "patch for abc123",
                           "effect": {"job": 471, "status": "passed"}, "merged": True}
    assert ci.jobs() == {471: "abc123"}  # job 472 was never created
    assert ci.polls() == [471] * (ci.pending_polls + 1)  # polled until it passed
    journal = await store.load_journal(run_id)
    assert journal[: len(at_kill)] == at_kill
    assert _phases(journal, "ci") == ["intent", "accepted", "ok"]
    [resume] = await client.resumes(run_id)
    assert json.loads(resume.detail)["classes"] == {"reuse": 1, "pending_external": 1}


# -- a dedup window, and a compensation followed as an effect -------------------------
@pytest.mark.slow
@pytest.mark.parametrize("window", [3600.0, 0.2], ids=["within", "past"])
async def test_an_unknown_refund_is_resent_only_within_its_dedup_window(
    workers: Workers, store: stead.Store, client: stead.Client, tmp_path: Path,
    window: float,
) -> None:
    outside = Outside(tmp_path)
    run_id = (await client.start("refund_windowed", "order-7", 700, window,
                                 version=1)).run_id
    # Dies once the refund is sent, before its outcome is journaled.
    crashed = workers.start("--crash", "before:2:refund", "--until-done", lease=DYING_LEASE)
    assert await workers.exit_code(crashed) == KILLED, workers.output(crashed)
    assert len(outside.real(IDEMPOTENT)) == 1
    await asyncio.sleep(window if window < 1 else 0)  # the short window passes
    fresh = workers.start()
    info = await _settled(client, run_id, "completed", "outcome_unknown")
    await workers.stop(fresh)
    sends = outside.sends(IDEMPOTENT)
    if window > 1:
        assert info.status == "completed" and len(sends) == 2  # resent with the one key
        assert {c["key"] for c in sends} == {f"{run_id}:1"}
    else:
        assert info.status == "outcome_unknown" and len(sends) == 1  # not resent
        assert info.outcome_unknown is not None
        assert "dedup window" in info.outcome_unknown.known
    assert len(outside.real(IDEMPOTENT)) == 1


@pytest.mark.slow
async def test_a_compensation_whose_worker_died_is_reconciled_not_repeated(
    workers: Workers, store: stead.Store, client: stead.Client, tmp_path: Path,
) -> None:
    outside = Outside(tmp_path)
    run_id = (await client.start("mail_compensated", "order-9", "ada@example.com",
                                 version=1)).run_id
    crashed = workers.start("--crash", "before:2:send_mail", "--until-done", lease=DYING_LEASE)
    assert await workers.exit_code(crashed) == KILLED, workers.output(crashed)
    fresh = workers.start()
    assert (await _settled(client, run_id, "outcome_unknown")).status == "outcome_unknown"
    await workers.stop(fresh)
    await client.reconcile(run_id, "send_mail", compensate="send a correction", by="alice")

    # The correction is sent as an effect of its own; its worker dies after
    # sending it, before its outcome is journaled: it stops on it, by name.
    crashed = workers.start("--crash", "before:2:send_mail.compensate", "--until-done",
                            lease=DYING_LEASE)
    assert await workers.exit_code(crashed) == KILLED, workers.output(crashed)
    fresh = workers.start()
    info = await _settled(client, run_id, "outcome_unknown")
    assert info.outcome_unknown is not None
    assert (info.outcome_unknown.name, info.outcome_unknown.key) == (
        "send_mail.compensate", f"{run_id}:1:compensate")
    [_, correction] = outside.mail.sent()
    await client.reconcile(run_id, "send_mail.compensate", by="alice",
                           happened={"message_id": correction["id"]})
    info = await _settled(client, run_id, "completed")
    await workers.stop(fresh)
    assert info.result == {"compensated": "send a correction",
                           "correction": {"message_id": correction["id"]}}
    assert [m["subject"] for m in outside.mail.sent()] == [
        "refund for order order-9", "correction: refund for order order-9"]
    assert _phases(await store.load_journal(run_id), "send_mail.compensate") == [
        "intent", "reconciled"]
