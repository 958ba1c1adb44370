"""Leases are judged by the database's clock, never a worker's: a worker
whose clock runs a minute ahead, next to a healthy worker that renews its
lease, never takes the live lease, so no step runs twice and an effect that
is not idempotent (asked with `check=`) is sent once. Business time (timers,
row times) still comes from each store's own clock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import stead
from stead.records import Fence, NewRun, RunRow
from stead.testing import DelegatingStore
from tests.helpers import Calls, Gate, SkewedClock
from tests.outside import Payments
from tests.test_effects_processes import Workers
from tests.workers.procs import DEADLINE, wait_until

AHEAD = 60.0  # the skewed worker's clock runs this far ahead
# Leases short enough to end several times in a test, long enough that a
# loaded machine still renews them in time (a renewal every third of one).
LEASE = 2.0
PROCESS_LEASE = 3.0


class ClaimCount(DelegatingStore):
    """Counts the claims a worker makes, and keeps what they took."""

    def __init__(self, inner: stead.Store) -> None:
        super().__init__(inner)
        self.claims = 0
        self.taken: list[RunRow] = []

    async def claim(
        self, worker_id: str, hosted: Sequence[str], lease_seconds: float, limit: int,
        exclude: Sequence[str] = (),
    ) -> list[RunRow]:
        rows = await self.inner.claim(worker_id, hosted, lease_seconds, limit, exclude)
        self.claims += 1
        self.taken += rows
        return rows


async def test_a_clock_ahead_neither_takes_nor_shortens_a_live_lease(db_url: str) -> None:
    healthy = await stead.open_store(db_url)
    ahead = await stead.open_store(db_url, clock=SkewedClock(AHEAD))
    try:
        await healthy.create_run(NewRun("r1", "wf", 1, None, "[]"))
        [row] = await healthy.claim("healthy", ["wf@1"], 10.0, 5)
        assert await ahead.claim("ahead", ["wf@1"], 10.0, 5) == []
        # Its renewal, too, ends the lease by the database's time, not its own.
        fence = Fence("r1", row.epoch, "healthy")
        assert await ahead.renew([fence], 10.0) == []
        renewed = await healthy.get_run("r1")
        assert renewed.lease_expires_at is not None
        assert renewed.lease_expires_at < time.time() + 10.0 + AHEAD / 2
        assert (await ahead.leased_runs())[0].run_id == "r1"
        # Business time is still each store's own clock.
        made, _ = await ahead.create_run(NewRun("r2", "wf", 1, None, "[]"))
        assert made.created_at > time.time() + AHEAD / 2
    finally:
        await ahead.close()
        await healthy.close()


async def test_a_worker_a_minute_ahead_never_takes_a_renewed_lease(db_url: str) -> None:
    app = stead.App("lease-clock")
    calls = Calls()
    gate = Gate()
    sent: list[str] = []

    async def hold() -> str:
        calls.hit("hold")
        return await gate.step()

    def charge(op: stead.Operation) -> str:
        sent.append(op.key)
        return "charged"

    def lookup(op: stead.Operation) -> stead.Outcome:
        return stead.Outcome.done("charged") if op.key in sent else stead.Outcome.not_found()

    @app.workflow(version=1)
    async def wf(run: stead.Run) -> str:
        await run.step("hold", hold)
        return str(await run.effect("charge", charge, check=lookup))

    options = stead.WorkerOptions(lease_seconds=LEASE, poll_interval=0.01)
    healthy_store = await stead.open_store(db_url)
    ahead_store = ClaimCount(await stead.open_store(db_url, clock=SkewedClock(AHEAD)))
    healthy = stead.Worker(app, healthy_store, options)
    ahead = stead.Worker(app, ahead_store, options)
    tasks = [asyncio.create_task(healthy.run())]
    try:
        run_id = (await stead.Client(healthy_store, app).start(wf)).run_id
        await asyncio.wait_for(gate.reached.wait(), 30)
        first = (await healthy_store.get_run(run_id)).lease_expires_at
        tasks.append(asyncio.create_task(ahead.run()))

        async def renewed_past_its_first_end() -> bool:
            # The lease was renewed to more than a lease length past its first
            # end (several renewals) while the worker ahead kept claiming.
            now = (await healthy_store.get_run(run_id)).lease_expires_at or 0.0
            return ahead_store.claims >= 5 and now > (first or 0.0) + LEASE
        await wait_until("the lease to be renewed while the worker ahead claims",
                         renewed_past_its_first_end)
        gate.open.set()
        info = await stead.Client(healthy_store, app).result(run_id, timeout=30)
        assert info == "charged"
    finally:
        healthy.stop()
        ahead.stop()
        await asyncio.gather(*tasks)
        await ahead_store.inner.close()
        await healthy_store.close()
    assert ahead_store.taken == []
    assert calls["hold"] == 1
    assert len(sent) == 1


async def test_a_worker_process_a_minute_ahead_never_takes_a_live_lease(
    tmp_path: Path, db_url: str,
) -> None:
    workers = Workers(tmp_path, db_url)
    gate = tmp_path / "gate"
    skewed_events = tmp_path / "skewed-events.log"
    store = await stead.open_store(db_url)
    try:
        client = stead.Client(store)
        run_id = (await client.start("refund_held", "A-1", 30, str(gate), version=1)).run_id
        workers.start(lease=str(PROCESS_LEASE))
        await wait_until("the healthy worker to hold the run",
                         lambda: Path(str(gate) + ".reached").exists())
        ahead = workers.start("--skew", str(AHEAD), "--events", str(skewed_events),
                              lease=str(PROCESS_LEASE))

        def ahead_claims() -> list[str]:
            if not skewed_events.exists():
                return []
            return [line.split(" ", 1)[1] for line in skewed_events.read_text().splitlines()
                    if line.startswith("claim ")]

        # The lease ends (by the worker's clock ahead) long before now: its
        # first claim would take it. Let it claim for over a lease length.
        started = time.monotonic()
        await wait_until("the worker ahead to claim for over a lease length",
                         lambda: len(ahead_claims()) >= 10
                         and time.monotonic() - started > PROCESS_LEASE)
        gate.touch()
        assert await client.result(run_id, timeout=DEADLINE) == {
            "effect": {"refund": "rf_1", "order": "A-1", "amount": 30}}
        assert set(ahead_claims()) == {"-"}, workers.output(ahead)
        journal = await client.journal(run_id)
        assert [r.status for r in journal if r.name == "hold" and r.status != "started"
                ] == ["ok"]
        assert len(Payments(tmp_path / "payments.json").calls("refund")) == 1
    finally:
        workers.stop_all()
        await store.close()


class LeaseEndsAfterClaims(DelegatingStore):
    """Ends a lease (`end`) right after the `after`-th claim looked and found
    nothing: a lease that ends between a worker's claim and its look at the
    leases it waits for."""

    def __init__(self, inner: stead.Store, after: int,
                 end: Callable[[], Awaitable[None]]) -> None:
        super().__init__(inner)
        self.after, self.end, self.claims = after, end, 0

    async def claim(
        self, worker_id: str, hosted: Sequence[str], lease_seconds: float, limit: int,
        exclude: Sequence[str] = (),
    ) -> list[RunRow]:
        rows = await self.inner.claim(worker_id, hosted, lease_seconds, limit, exclude)
        self.claims += 1
        if self.claims == self.after and not rows:
            await self.end()
        return rows


_IDLE = stead.App("idle")


@_IDLE.workflow()
async def hello(run: stead.Run) -> str:
    return await run.step("greet", lambda: "hello")


async def _until_idle_completes(store: stead.Store, run_id: str) -> None:
    """A worker run until idle (through `store`) leaves `run_id` completed,
    taken at the epoch after the one leased before it started."""
    worker = stead.Worker(_IDLE, store, stead.WorkerOptions(lease_seconds=30.0,
                                                            poll_interval=0.01))
    await asyncio.wait_for(worker.run_until_idle(), 30)
    info = await stead.Client(store).get(run_id)
    assert info.status == "completed" and info.epoch == 2


async def test_until_idle_takes_over_a_lease_that_ends_after_its_claim_looked(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    run_id = (await stead.Client(fstore, _IDLE).start(hello)).run_id
    await fstore.claim("w-crashed", ["hello@1"], 30.0, 1)  # it died holding the lease
    # The first claim finds the lease live and the worker waits for it; the
    # second finds it live too, and the lease ends just after.
    async def run_out() -> None:  # the lease clock moves past every lease
        clock.advance(3600)

    await _until_idle_completes(LeaseEndsAfterClaims(fstore, 2, run_out), run_id)


async def test_until_idle_takes_a_run_whose_lease_ended_early_after_its_claim_looked(
    fstore: stead.Store,
) -> None:
    run_id = (await stead.Client(fstore, _IDLE).start(hello)).run_id
    [row] = await fstore.claim("w-other", ["hello@1"], 30.0, 1)
    # Given back long before it would have run out: as its holder releases the
    # run, or a peer ends the lease of a dead holder.
    async def give_back() -> None:
        await fstore.release(Fence(run_id, row.epoch, "w-other"))

    await _until_idle_completes(LeaseEndsAfterClaims(fstore, 2, give_back), run_id)
