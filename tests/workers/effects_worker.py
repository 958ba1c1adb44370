"""A real worker process for the effect crash tests (tests/test_effects_processes.py).

    python effects_worker.py --db URL --outside DIR --events FILE
        [--crash before:N:name | --crash after:N:name] [--lease 1.0] [--until-done]
        [--skew SECONDS]

The workflows reach the outside through the test doubles of tests/outside.py,
whose state lives in files under DIR, so the test can read what really
happened outside after the process is SIGKILLed. Every claim the worker makes
(found or not) is noted in the events file as "claim <run ids or ->", so a test
can see that a stopped run is not claimed again while the worker keeps polling.
`--skew` runs the worker on a clock that many seconds off the system's.
The repository root must be on PYTHONPATH (for `tests.outside`).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import stead
from stead.records import RunRow
from stead.testing import CrashingStore, CrashPoint, DelegatingStore
from tests.helpers import SkewedClock
from tests.outside import CI, Mail, Payments
from tests.workers.crash_worker import until_done

app = stead.App("effect-tests")


class _Outside:
    payments: Payments
    ci: CI
    mail: Mail


OUTSIDE = _Outside()


def connect(folder: Path) -> None:
    OUTSIDE.payments = Payments(folder / "payments.json")
    OUTSIDE.ci = CI(folder / "ci.json")
    OUTSIDE.mail = Mail(folder / "mail.json")


# -- effect functions --------------------------------------------------------------
def dispatch_refund(op: stead.Operation, order: str, amount: int) -> dict[str, Any]:
    return OUTSIDE.payments.refund(order, amount, idempotency_key=op.key)


async def dispatch_refund_accepted(op: stead.Operation, order: str, amount: int
                                   ) -> dict[str, Any]:
    """The same refund, journaling that the payment service accepted it."""
    receipt = OUTSIDE.payments.refund(order, amount, idempotency_key=op.key)
    await op.accepted(receipt["refund"])
    return receipt


def find_refund(op: stead.Operation) -> stead.Outcome:
    receipt = OUTSIDE.payments.lookup(op.key)
    return stead.Outcome.done(receipt) if receipt else stead.Outcome.not_found()


def send_mail(op: stead.Operation, to: str, subject: str) -> dict[str, Any]:
    return {"message_id": OUTSIDE.mail.send(to, subject)}


async def send_mail_accepted(op: stead.Operation, to: str, subject: str) -> dict[str, Any]:
    message_id = OUTSIDE.mail.send(to, subject)
    await op.accepted(message_id)
    return {"message_id": message_id}


async def run_ci(op: stead.Operation, commit: str) -> dict[str, Any]:
    """Submit a CI job, journal that CI accepted it, then wait for its result."""
    job = OUTSIDE.ci.submit(commit)
    await op.accepted(str(job))
    while (status := OUTSIDE.ci.status(job)) == "pending":
        await asyncio.sleep(0.02)
    return {"job": job, "status": status}


def ci_status(op: stead.Operation) -> stead.Outcome:
    assert op.external_id is not None, "CI is only asked about a job it accepted"
    job = int(op.external_id)
    status = OUTSIDE.ci.status(job)
    if status == "pending":
        return stead.Outcome.pending(f"job {job} is running")
    if status == "passed":
        return stead.Outcome.done({"job": job, "status": status})
    return stead.Outcome.unknown(f"CI does not know job {job}")


def hold(gate: str) -> str:
    """Hold the run until the test creates the file `gate` (a sync step: it
    waits in a thread), saying it got here by creating `gate`.reached."""
    Path(gate + ".reached").touch()
    deadline = time.monotonic() + 60.0
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test never opened {gate}")
        time.sleep(0.02)
    return "through"


# -- workflows ----------------------------------------------------------------------
def eligible(order: str, amount: int) -> bool:
    return amount > 0


def close(order: str, what: dict[str, Any]) -> str:
    return f"order {order} closed after {sorted(what.items())}"


@app.workflow(version=1)
async def refund_idempotent(run: stead.Run, order: str, amount: int, accept: bool
                            ) -> dict[str, Any]:
    """The payment service honours keys: resend with the same key."""
    await run.step("eligible", eligible, order, amount)
    fn = dispatch_refund_accepted if accept else dispatch_refund
    receipt = await run.effect("refund", fn, order, amount, idempotent=True)
    return {"effect": receipt, "closed": await run.step("close", close, order, receipt)}


@app.workflow(version=1)
async def refund_checked(run: stead.Run, order: str, amount: int, accept: bool
                         ) -> dict[str, Any]:
    """Not declared idempotent; the payment service is asked by key instead."""
    await run.step("eligible", eligible, order, amount)
    fn = dispatch_refund_accepted if accept else dispatch_refund
    receipt = await run.effect("refund", fn, order, amount, check=find_refund,
                               poll_every=0.05)
    return {"effect": receipt, "closed": await run.step("close", close, order, receipt)}


@app.workflow(version=1)
async def refund_held(run: stead.Run, order: str, amount: int, gate: str) -> dict[str, Any]:
    """`refund_checked`, held in a step until the test opens `gate`."""
    await run.step("hold", hold, gate)
    receipt = await run.effect("refund", dispatch_refund, order, amount, check=find_refund,
                               poll_every=0.05)
    return {"effect": receipt}


@app.workflow(version=1)
async def mail(run: stead.Run, order: str, to: str, accept: bool) -> dict[str, Any]:
    """Mail can be neither resent safely nor asked: only a human can tell."""
    await run.step("eligible", eligible, order, 1)
    fn = send_mail_accepted if accept else send_mail
    sent = await run.effect("send_mail", fn, to, f"refund for order {order}")
    return {"effect": sent, "closed": await run.step("close", close, order, sent)}


@app.workflow(version=1)
async def coding_agent(run: stead.Run, commit: str) -> dict[str, Any]:
    """Push a patch, wait for CI, merge on green."""
    patch = await run.step("write_patch", lambda: f"patch for {commit}")
    ci: dict[str, Any] = await run.effect("ci", run_ci, commit, check=ci_status, poll_every=0.05)
    merged = await run.step("merge", lambda: ci["status"] == "passed")
    return {"patch": patch, "effect": ci, "merged": merged}


@app.workflow(version=1)
async def refund_windowed(run: stead.Run, order: str, amount: int, window: float
                          ) -> dict[str, Any]:
    """The payment service keeps keys for `window` seconds: resent only within it."""
    await run.step("eligible", eligible, order, amount)
    receipt = await run.effect("refund", dispatch_refund, order, amount,
                               idempotent=dt.timedelta(seconds=window))
    return {"effect": receipt, "closed": await run.step("close", close, order, receipt)}


def send_correction(op: stead.Operation, to: str, subject: str) -> dict[str, Any]:
    return {"message_id": OUTSIDE.mail.send(to, f"correction: {subject}")}


@app.workflow(version=1)
async def mail_compensated(run: stead.Run, order: str, to: str) -> dict[str, Any]:
    """A mail that may be taken back by a correction, once a person says so."""
    await run.step("eligible", eligible, order, 1)
    try:
        sent = await run.effect("send_mail", send_mail, to, f"refund for order {order}",
                                compensate=send_correction)
    except stead.EffectCompensated as exc:
        return {"compensated": exc.detail, "correction": exc.compensation}
    return {"effect": sent}


# -- main ---------------------------------------------------------------------
def _note(events: Path, line: str) -> None:
    fd = os.open(events, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


class ClaimLog(DelegatingStore):
    """Notes every claim in the events file: "claim <run ids or ->"."""

    def __init__(self, inner: stead.Store, events: Path) -> None:
        super().__init__(inner)
        self.events = events

    async def claim(
        self, worker_id: str, hosted: Sequence[str], lease_seconds: float, limit: int,
        exclude: Sequence[str] = (),
    ) -> list[RunRow]:
        rows = await self.inner.claim(worker_id, hosted, lease_seconds, limit, exclude)
        _note(self.events, "claim " + (",".join(r.run_id for r in rows) or "-"))
        return rows


def crash_point(text: str) -> CrashPoint:
    """`before:1:refund`, `after:2:ci` -> a CrashPoint."""
    when, number, name = text.split(":")
    if when == "before":
        return CrashPoint(before_commit=int(number), name=name)
    if when == "after":
        return CrashPoint(after_commit=int(number), name=name)
    raise SystemExit(f"bad --crash {text!r}: use before:N:name or after:N:name")


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True, help="the database URL")
    p.add_argument("--outside", required=True, type=Path, help="folder of the test doubles")
    p.add_argument("--events", required=True, type=Path)
    p.add_argument("--crash")
    p.add_argument("--lease", type=float, default=1.0)
    p.add_argument("--until-done", action="store_true")
    p.add_argument("--skew", type=float, default=0.0)
    args = p.parse_args()

    connect(args.outside)
    inner = await stead.open_store(args.db, clock=SkewedClock(args.skew))
    store: stead.Store = inner
    if args.crash:
        store = CrashingStore(store, crash_point(args.crash))
    store = ClaimLog(store, args.events)
    worker = stead.Worker(app, store, stead.WorkerOptions(
        lease_seconds=args.lease, poll_interval=0.05, shutdown_grace=5.0,
    ))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    watcher = asyncio.create_task(until_done(inner, worker)) if args.until_done else None
    try:
        await worker.run()
    finally:
        if watcher is not None:
            watcher.cancel()
        await inner.close()


if __name__ == "__main__":
    asyncio.run(main())
