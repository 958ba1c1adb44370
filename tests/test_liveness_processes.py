"""A worker's life is not its connection: real worker processes on
PostgreSQL, on one machine and on two "hosts" (a new UTS namespace with a
host name of its own, `unshare --uts`, so that neither worker can judge the
other's process and only the presence lock and the lease speak).

Whatever happens to a live worker's connections (its presence connection
terminated, every backend terminated again and again at random), none of its
runs is taken over: no step runs twice, no payment is sent twice, nothing ends
`outcome_unknown`. A worker that really dies (SIGKILL) still has its runs
taken over within two seconds with the default lease."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

import stead
from stead.records import RunStatus
from tests import pg
from tests.workers.procs import DEADLINE, SLOW, wait_until

SCRIPT = Path(__file__).with_name("workers") / "liveness_worker.py"
TAKEOVER = 2.0  # the promise after a SIGKILL, with the default lease

pytestmark = pytest.mark.slow


def _can_unshare() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(["unshare", "--uts", "true"], capture_output=True)
    if probe.returncode != 0:
        return f"unshare --uts is not allowed here ({probe.stderr.decode().strip()})"
    return None


class Fleet:
    """Worker processes on one schema, each maybe on a host of its own, and
    what the outside world saw them do (see tests/workers/liveness_worker.py)."""

    def __init__(self, tmp: Path, url: str) -> None:
        self.tmp = tmp
        self.url = url
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, worker_id: str, *, host: str | None = None, lease: float = 30.0,
              user: str | None = None) -> subprocess.Popen[bytes]:
        url = pg.with_query(self.url, application_name=f"stead-w-{worker_id}")
        if user is not None:
            parts = urlsplit(url)
            url = urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc.split('@')[-1]}"))
        argv = [sys.executable, str(SCRIPT), "--db", url, "--dir", str(self.tmp),
                "--worker-id", worker_id, "--lease", str(lease)]
        if host is not None:
            why = _can_unshare()
            if why is not None:
                if os.environ.get("CI") == "true":
                    pytest.fail(f"CI=true and two hosts cannot be simulated: {why}")
                pytest.skip(why)
            argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, *argv]
        log = open(self.tmp / f"{worker_id}.out", "wb")  # noqa: SIM115 - the process keeps it
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log.close()
        self.procs[worker_id] = proc
        return proc

    def output(self, worker_id: str) -> str:
        return (self.tmp / f"{worker_id}.out").read_text(errors="replace")[-6000:]

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()

    def lines(self, name: str) -> list[list[str]]:
        path = self.tmp / name
        return [line.split() for line in path.read_text().splitlines()] if path.exists() else []

    def steps(self) -> Counter[tuple[str, str]]:
        return Counter((run_id, step) for run_id, step, _worker in self.lines("steps.log"))

    def paid(self) -> Counter[str]:
        return Counter(key for key, _worker in self.lines("ledger.log"))

    def sent_by(self, worker_id: str) -> int:
        return sum(1 for _key, worker in self.lines("sent.log") if worker == worker_id)


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str) -> Iterator[Fleet]:
    f = Fleet(tmp_path, pg_url)
    yield f
    f.stop_all()


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[stead.Store]:
    s = await stead.open_store(pg_url)
    yield s
    await s.close()


def _presence_backend(worker_id: str) -> list[int]:
    """The server pids of `worker_id`'s sessions holding an advisory lock."""
    rows = pg.admin(
        "SELECT DISTINCT a.pid FROM pg_stat_activity AS a JOIN pg_locks AS l ON l.pid = a.pid "
        "WHERE a.application_name = %s AND l.locktype = 'advisory' AND l.granted "
        "AND l.classid = 1937007980", f"stead-w-{worker_id}")
    return [int(str(r[0])) for r in rows]


def _terminate(pids: list[int]) -> int:
    for pid in pids:
        pg.admin("SELECT pg_terminate_backend(%s)", pid)
    return len(pids)


async def _registered(store: stead.Store, *worker_ids: str) -> bool:
    """Whether each worker recorded its process and holds its presence lock."""
    return all(_presence_backend(w) for w in worker_ids)


async def _settled(store: stead.Store, run_ids: list[str]) -> bool:
    for run_id in run_ids:
        if (await store.get_run(run_id)).status in (RunStatus.PENDING, RunStatus.RUNNING):
            return False
    return True


async def _check_once(fleet: Fleet, store: stead.Store, run_ids: list[str], steps: int,
                      *, taken_over: bool) -> None:
    for run_id in run_ids:
        row = await store.get_run(run_id)
        assert row.status == RunStatus.COMPLETED, (row.status, row.error)
        if not taken_over:
            assert row.epoch == 1, f"run {run_id} was taken over from a live worker"
    doubled = {k: n for k, n in fleet.steps().items() if n > 1}
    assert not doubled, f"steps ran twice: {doubled}"
    assert len(fleet.steps()) == steps * len(run_ids)
    paid = fleet.paid()
    assert len(paid) == len(run_ids) and set(paid.values()) == {1}, f"paid: {paid}"


@pytest.mark.parametrize("hosts", [("alpha", "beta"), (None, None)], ids=["two-hosts", "one"])
async def test_a_dropped_presence_connection_during_a_payment_takes_nothing_over(
    fleet: Fleet, store: stead.Store, hosts: tuple[str | None, str | None]
) -> None:
    """The story of the bug: worker A sends a payment that takes seconds; its
    presence connection is terminated, again each time A takes it back; worker
    B must not end A's lease, ask the payee, hear "not found" and pay again."""
    fleet.start("a", host=hosts[0])
    fleet.start("b", host=hosts[1])
    await wait_until("both workers to hold their presence", lambda: _registered(store, "a", "b"))
    client = stead.Client(store)
    run_id = (await client.start("charge", 4, 0.05, 3.0, version=1)).run_id
    await wait_until("a worker to start sending", lambda: bool(fleet.lines("sent.log")))
    [[_key, sender]] = fleet.lines("sent.log")
    # Cut it again whenever the sender has taken it back, until the payee has
    # the payment.
    cut = 0
    while not fleet.paid():
        cut += _terminate(_presence_backend(sender))
        await asyncio.sleep(0.05)
    assert cut >= 1
    await wait_until("the run to end", lambda: _settled(store, [run_id]), timeout=DEADLINE)
    await _check_once(fleet, store, [run_id], 4, taken_over=False)


@pytest.mark.parametrize("hosts", [("alpha", "beta"), (None, None)], ids=["two-hosts", "one"])
async def test_backends_of_live_workers_terminated_at_random_take_nothing_over(
    fleet: Fleet, store: stead.Store, hosts: tuple[str | None, str | None]
) -> None:
    """Every backend of both workers (pool, LISTEN, presence, lease keeper)
    is terminated again and again while they run 12 runs, each with a slow
    payment: nothing moves between them, nothing runs or is paid twice."""
    client = stead.Client(store)
    run_ids = [(await client.start("charge", 6, 0.05, 0.8, version=1)).run_id
               for _ in range(12)]
    fleet.start("a", host=hosts[0])
    fleet.start("b", host=hosts[1])
    await wait_until("both workers to hold their presence", lambda: _registered(store, "a", "b"))
    rng = random.Random(41)
    killed = 0
    deadline = time.monotonic() + 120 * SLOW
    while not await _settled(store, run_ids):
        assert time.monotonic() < deadline, "the runs did not end"
        await asyncio.sleep(rng.uniform(0.05, 0.4))
        killed += await asyncio.to_thread(pg.terminate, f"stead-w-{rng.choice('ab')}")
    assert killed >= 5, f"only {killed} backends were terminated: the test proved little"
    await _check_once(fleet, store, run_ids, 6, taken_over=False)


@pytest.mark.parametrize("hosts", [("alpha", "beta"), (None, None)], ids=["two-hosts", "one"])
async def test_a_killed_worker_on_postgres_is_taken_over_within_two_seconds(
    fleet: Fleet, store: stead.Store, hosts: tuple[str | None, str | None]
) -> None:
    client = stead.Client(store)
    run_id = (await client.start("charge", 300, 0.05, 0.1, version=1)).run_id
    doomed = fleet.start("a", host=hosts[0])
    await wait_until("A to take the run", lambda: len(fleet.steps()) >= 2)
    fleet.start("b", host=hosts[1])
    await wait_until("both workers to hold their presence", lambda: _registered(store, "a", "b"))
    doomed.send_signal(signal.SIGKILL)
    killed = time.monotonic()

    async def taken() -> bool:
        return (await store.get_run(run_id)).epoch >= 2

    await wait_until("B to take the run", taken, timeout=30 * SLOW)
    took = time.monotonic() - killed
    assert took < TAKEOVER * SLOW, f"took {took:.1f} s"
    await wait_until("the run to end", lambda: _settled(store, [run_id]))
    row = await store.get_run(run_id)
    assert row.status == RunStatus.COMPLETED, row.error
    assert set(fleet.paid().values()) == {1}


def _role_ddl(statement: str, role: str) -> None:
    """`statement` with `{}` standing for the role's name, quoted."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(pg.URL, autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(sql.Identifier(role)))


@pytest.fixture
def roles() -> Iterator[list[str]]:
    """Login roles of the test's own, which a test may stop from logging in."""
    made: list[str] = []
    yield made
    for role in made:
        pg.admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                 role)
        _role_ddl("DROP ROLE IF EXISTS {}", role)


def _role(roles: list[str]) -> str:
    name = f"stead_cut_{uuid.uuid4().hex[:8]}"
    _role_ddl("CREATE ROLE {} LOGIN SUPERUSER", name)
    roles.append(name)
    return name


async def test_a_worker_cut_off_past_the_grace_does_not_get_its_payment_sent_twice(
    fleet: Fleet, store: stead.Store, roles: list[str]
) -> None:
    """The sender's presence connection drops and it cannot log in again (as
    when a network partition cuts it off), while its payment is in flight.
    After the grace the other worker takes it for dead and the run over; the
    payee does not know the payment yet ("not found"), but the sender may
    still be sending: the new holder asks again only once the sender's lease
    would have run out, finds the payment, and does not pay again."""
    if os.environ.get("STEAD_TEST_PGBOUNCER"):
        pytest.skip("cuts off one role's logins on the server; the pooler pass's PgBouncer "
                    "logs in as postgres, and its direct URL too")
    users = {"a": _role(roles), "b": _role(roles)}
    for worker_id, host in (("a", "alpha"), ("b", "beta")):
        fleet.start(worker_id, host=host, lease=8.0, user=users[worker_id])
    await wait_until("both workers to hold their presence", lambda: _registered(store, "a", "b"))
    client = stead.Client(store)
    run_id = (await client.start("charge", 4, 0.05, 5.0, version=1)).run_id
    await wait_until("a worker to start sending", lambda: bool(fleet.lines("sent.log")))
    [[_key, sender]] = fleet.lines("sent.log")
    heir = "b" if sender == "a" else "a"
    _role_ddl("ALTER ROLE {} NOLOGIN", users[sender])
    assert _terminate(_presence_backend(sender)) == 1

    async def taken() -> bool:
        return (await store.get_run(run_id)).epoch >= 2

    await wait_until("the sender to be taken for dead", taken, timeout=DEADLINE)
    await wait_until("the run to end", lambda: _settled(store, [run_id]), timeout=DEADLINE)
    row = await store.get_run(run_id)
    assert row.status == RunStatus.COMPLETED, row.error
    assert row.lease_owner is None and row.epoch == 2
    assert fleet.paid() == Counter({_key: 1}), "the payment was sent twice"
    assert fleet.sent_by(heir) == 0
    assert "may still be sending" in fleet.output(heir)
    doubled = {k: n for k, n in fleet.steps().items() if n > 1}
    assert not doubled, f"steps ran twice: {doubled}"
