"""Bad input gets a clear, typed error, and no record is lost or half-written.

Corrupt rows are made with the sqlite3 module directly, as a disk fault or a
careless hand edit would make them; stead must stop the affected run for a
human, leave the row exactly as it found it, and keep serving every other run.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stead
from tests.helpers import Gate, run_until_gate


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "stead.db"



@contextlib.contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection to the store's file, committed and closed on exit."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def journal_rows(path: Path, run_id: str) -> list[tuple[Any, ...]]:
    with raw(path) as conn:
        return conn.execute(
            "SELECT * FROM journal WHERE run_id = ? ORDER BY rowid", (run_id,)
        ).fetchall()


def one() -> int:
    return 1


def two() -> int:
    return 2


def healthy_app(app: stead.App) -> stead.Workflow[[int], int]:
    @app.workflow(name="healthy")
    async def healthy(run: stead.Run, n: int) -> int:
        return n + await run.step("one", one)

    return healthy


# -- corrupt journal rows ---------------------------------------------------------
@pytest.mark.parametrize(
    ("corruption", "params", "says"),
    [
        ("UPDATE journal SET payload = '{not json' WHERE run_id = ? AND seq = 0",
         (), ["seq 0", "not JSON"]),
        ("UPDATE journal SET seq = 7 WHERE run_id = ? AND seq = 1",
         (), ["seq 7", "expected seq 1", "gap"]),
        ("DELETE FROM journal WHERE run_id = ? AND seq = 0",
         (), ["seq 1", "expected seq 0"]),
        ("UPDATE journal SET status = 'maybe' WHERE run_id = ? AND seq = 1",
         (), ["seq 1", "unknown status 'maybe'"]),
        ("UPDATE journal SET kind = 'teleport' WHERE run_id = ? AND seq = 0",
         (), ["seq 0", "unknown kind 'teleport'"]),
    ],
    ids=["payload-not-json", "seq-gap", "missing-first", "unknown-status", "unknown-kind"],
)
@pytest.mark.sqlite_only
async def test_a_corrupt_journal_row_stops_only_its_run_and_stays_untouched(
    fstore: stead.Store, db_path: Path, corruption: str, params: tuple[Any, ...],
    says: list[str],
) -> None:
    app = stead.App("t")
    gate = Gate()
    healthy = healthy_app(app)
    ran_after: list[str] = []

    def after() -> str:
        ran_after.append("after")
        return "after"

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        await run.step("one", one)
        await run.step("gate", gate.step)
        return await run.step("after", after)

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await run_until_gate(app, fstore, gate)
    assert len(await client.journal(info.run_id)) == 2
    assert (await client.get(info.run_id)).status == "running"

    with raw(db_path) as conn:
        conn.execute(corruption, (info.run_id, *params))
    before = journal_rows(db_path, info.run_id)

    # A healthy run started before, and one after, the bad one is met.
    first = await client.start(healthy, 1)
    await stead.Worker(app, fstore).run_until_idle()
    second = await client.start(healthy, 2)
    await stead.Worker(app, fstore).run_until_idle()

    got = await client.get(info.run_id)
    assert got.status == "incompatible_checkpoint"
    assert got.error is not None and got.error["type"] == "CorruptRecord"
    for fragment in says:
        assert fragment in got.error["message"]
    assert "kept as it is" in got.error["message"]
    assert ran_after == []  # nothing past the corrupt journal ran
    assert journal_rows(db_path, info.run_id) == before  # not repaired, not dropped
    with pytest.raises(stead.RunFailed) as failed:
        await client.result(info.run_id, timeout=5)
    assert failed.value.status == "incompatible_checkpoint"

    assert await client.result(first.run_id, timeout=5) == 2
    assert await client.result(second.run_id, timeout=5) == 3

    # Stopped for a human: no worker claims it again.
    await stead.Worker(app, fstore).run_until_idle()
    assert (await client.get(info.run_id)).status == "incompatible_checkpoint"
    assert journal_rows(db_path, info.run_id) == before


# -- corrupt or unfitting run input -------------------------------------------------
@pytest.mark.parametrize(
    ("stored", "says"),
    [
        ("not json at all", "stored input is corrupt"),
        ('{"args": 5, "kwargs": {}}', "stored input is corrupt"),
        ("[]", "stored input is corrupt"),
        ('{"args": ["seven"], "kwargs": {}}', "does not fit the parameters of wf@1"),
        ('{"args": [], "kwargs": {}}', "does not fit the parameters of wf@1"),
        ('{"args": [1], "kwargs": {"extra": 2}}', "does not fit the parameters of wf@1"),
    ],
    ids=["not-json", "args-not-a-list", "not-an-object", "wrong-type", "missing-arg",
         "unknown-kwarg"],
)
@pytest.mark.sqlite_only
async def test_a_run_whose_input_cannot_be_used_stops_once_for_a_human(
    fstore: stead.Store, db_path: Path, stored: str, says: str
) -> None:
    app = stead.App("t")
    healthy = healthy_app(app)
    called: list[int] = []

    @app.workflow()
    async def wf(run: stead.Run, n: int) -> int:
        called.append(n)
        return n

    client = stead.Client(fstore, app)
    info = await client.start(wf, 1)
    other = await client.start(healthy, 1)
    with raw(db_path) as conn:
        conn.execute("UPDATE runs SET input = ? WHERE run_id = ?", (stored, info.run_id))

    await stead.Worker(app, fstore).run_until_idle()
    got = await client.get(info.run_id)
    assert got.status == "incompatible_checkpoint"
    assert got.error is not None and got.error["type"] == "CorruptRecord"
    assert info.run_id in got.error["message"] and says in got.error["message"]
    assert called == []
    assert got.epoch == 1  # tried once, not in a loop
    with raw(db_path) as conn:
        (kept,) = conn.execute(
            "SELECT input FROM runs WHERE run_id = ?", (info.run_id,)
        ).fetchone()
    assert kept == stored
    assert await client.result(other.run_id, timeout=5) == 2


async def test_wrongly_typed_arguments_at_start_stop_the_run_instead_of_looping(
    db_url: str,
) -> None:
    """A client without the app cannot check arguments against the signature;
    the worker must then stop the run once, not die on it at every lease expiry."""
    clock = stead.FakeClock()
    store = await stead.open_store(db_url, clock=clock, lease_clock=clock)
    try:
        app = stead.App("t")

        @app.workflow()
        async def wf(run: stead.Run, n: int) -> int:
            return n

        with pytest.raises(stead.InvalidInput, match="wf@1"):
            await stead.Client(store, app).start(wf, "seven")
        with pytest.raises(stead.InvalidInput, match="missing a required argument"):
            await stead.Client(store, app).start("wf")
        client = stead.Client(store)  # knows no app: cannot check
        info = await client.start("wf", "seven", version=1)
        for _ in range(3):
            await stead.Worker(app, store).run_until_idle()
            clock.advance(3600)
        got = await client.get(info.run_id)
        assert got.status == "incompatible_checkpoint" and got.epoch == 1
        assert got.error is not None and "seven" in got.error["message"]
    finally:
        await store.close()


# -- workflows: unknown, unhosted, changed -------------------------------------------
async def test_starting_an_unknown_workflow_is_refused_and_writes_nothing(
    fstore: stead.Store,
) -> None:
    app = stead.App("t")
    healthy_app(app)
    client = stead.Client(fstore, app)
    commits = fstore.commits
    with pytest.raises(stead.UnknownWorkflow, match=r"no workflow nope.*registered: healthy@1"):
        await client.start("nope")
    with pytest.raises(stead.UnknownWorkflow, match="healthy@2"):
        await client.start("healthy", version=2)
    with pytest.raises(stead.UnknownWorkflow, match="without an app"):
        await stead.Client(fstore).start("healthy")
    assert fstore.commits == commits
    assert await fstore.list_runs() == []


async def test_a_run_of_a_workflow_no_worker_hosts_stays_pending(fstore: stead.Store) -> None:
    app = stead.App("t")
    healthy = healthy_app(app)
    client = stead.Client(fstore)  # no app: starts by name and explicit version
    orphan = await client.start("elsewhere", 1, version=3)
    newer = await client.start("healthy", 1, version=2)
    ok = await client.start(healthy, 1)
    await stead.Worker(app, fstore).run_until_idle()
    for run_id in (orphan.run_id, newer.run_id):
        got = await client.get(run_id)
        assert got.status == "pending" and got.epoch == 0 and got.lease_owner is None
        assert await client.journal(run_id) == []
    assert await client.result(ok.run_id, timeout=5) == 2

    # A worker that does host it takes it from there.
    later = stead.App("t")

    @later.workflow(name="elsewhere", version=3)
    async def elsewhere(run: stead.Run, n: int) -> int:
        return n * 10

    await stead.Worker(later, fstore).run_until_idle()
    assert await client.result(orphan.run_id, timeout=5) == 10


async def test_a_workflow_changed_under_its_checkpoint_stops_as_incompatible(
    fstore: stead.Store,
) -> None:
    gate = Gate()
    v1 = stead.App("t")

    @v1.workflow(name="refund", version=1)
    async def refund_v1(run: stead.Run, order: str) -> str:
        await run.step("load", one)
        await run.step("gate", gate.step)
        return str(await run.step("send", two))

    client = stead.Client(fstore, v1)
    info = await client.start(refund_v1, "123")
    await run_until_gate(v1, fstore, gate)
    before = await fstore.load_journal(info.run_id)
    assert len(before) == 2

    # A deploy: same name and version, different code.
    sent: list[str] = []
    changed = stead.App("t")

    def send() -> str:
        sent.append("sent")
        return "sent"

    @changed.workflow(name="refund", version=1)
    async def refund_changed(run: stead.Run, order: str) -> str:
        await run.step("fetch", one)
        return await run.step("send", send)

    await stead.Worker(changed, fstore).run_until_idle()
    got = await client.get(info.run_id)
    assert got.status == "incompatible_checkpoint"
    assert got.error is not None and got.error["type"] == "NonDeterminism"
    message = got.error["message"]
    assert "'load'" in message and "'fetch'" in message and "seq 0" in message
    assert sent == []  # nothing of the new code ran past the mismatch
    assert await fstore.load_journal(info.run_id) == before
    listed = await client.list_runs(status="incompatible_checkpoint")
    assert [r.run_id for r in listed] == [info.run_id]
    with pytest.raises(stead.RunFailed, match="incompatible_checkpoint"):
        await client.result(info.run_id, timeout=5)


# -- values that are not JSON ----------------------------------------------------------
async def test_a_non_json_argument_to_start_is_refused_and_writes_nothing(
    fstore: stead.Store,
) -> None:
    app = stead.App("t")
    healthy = healthy_app(app)
    client = stead.Client(fstore, app)
    commits = fstore.commits
    with pytest.raises(stead.SerializationError, match="input of workflow 'healthy'"):
        await client.start(healthy, object())
    with pytest.raises(stead.SerializationError):
        await client.start(healthy, 1, extra={1, 2})
    with pytest.raises(stead.SerializationError):
        await client.start(healthy, float("nan"))
    assert fstore.commits == commits
    assert await fstore.list_runs() == []


async def test_a_non_json_step_argument_raises_before_anything_runs_or_is_written(
    fstore: stead.Store,
) -> None:
    app = stead.App("t")
    called: list[object] = []

    def use(value: object) -> str:
        called.append(value)
        return "used"

    @app.workflow()
    async def caught(run: stead.Run) -> str:
        try:
            await run.step("bad", use, object())
        except stead.SerializationError as exc:
            assert "arguments cannot be stored as JSON" in str(exc)
        return await run.step("good", use, "fine")

    @app.workflow()
    async def uncaught(run: stead.Run) -> str:
        await run.step("first", use, "fine")
        return await run.step("bad", use, value={1, 2})

    client = stead.Client(fstore, app)
    a = await client.start(caught)
    b = await client.start(uncaught)
    await stead.Worker(app, fstore).run_until_idle()

    assert await client.result(a.run_id, timeout=5) == "used"
    assert [r.name for r in await client.journal(a.run_id)] == ["good"]

    got = await client.get(b.run_id)
    assert got.status == "failed"
    assert got.error is not None and got.error["type"] == "SerializationError"
    assert [r.name for r in await client.journal(b.run_id)] == ["first"]
    assert called == ["fine", "fine"]  # the bad calls never reached `use`


async def test_a_step_returning_a_non_json_value_fails_at_that_step_with_nothing_half_written(
    fstore: stead.Store,
) -> None:
    app = stead.App("t")
    calls: list[str] = []

    class Opaque:
        pass

    def opaque() -> Opaque:
        calls.append("opaque")
        return Opaque()

    @app.workflow()
    async def wf(run: stead.Run) -> str:
        await run.step("one", one)
        stamp = run.now()
        await run.step("opaque", opaque)
        return stamp.isoformat()

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    got = await client.get(info.run_id)
    assert got.status == "failed"
    assert got.error is not None and got.error["type"] == "SerializationError"
    assert "the result of step 'opaque'" in got.error["message"]
    assert "Opaque" in got.error["message"]
    journal = await client.journal(info.run_id)
    # The step's record is absent, not truncated; what came before it is whole,
    # including run.now(), carried by the final write.
    assert [(r.kind, r.name) for r in journal] == [("step", "one"), ("now", "now")]
    assert [r.seq for r in journal] == [0, 1]
    assert calls == ["opaque"]


# -- the database itself -----------------------------------------------------------------
@pytest.mark.sqlite_only
async def test_a_locked_database_is_store_unavailable_and_nothing_is_written(
    db_url: str, db_path: Path
) -> None:
    app = stead.App("t")
    healthy = healthy_app(app)
    store = await stead.open_store(db_url + "?busy_timeout=0.2")
    assert isinstance(store, stead.Store)
    try:
        client = stead.Client(store, app)
        done = await client.start(healthy, 1)
        await stead.Worker(app, store).run_until_idle()

        with raw(db_path) as holder:
            holder.execute("BEGIN EXCLUSIVE")
            try:
                # Opening a database whose schema is current writes nothing: it opens.
                await (await stead.open_store(db_url + "?busy_timeout=0.2")).close()
                with pytest.raises(stead.StoreUnavailable, match=r"locked.*nothing was written"):
                    await client.start(healthy, 2)
                with pytest.raises(stead.StoreUnavailable):
                    await client.cancel(done.run_id)
                # Reads still work under WAL.
                assert (await client.get(done.run_id)).status == "completed"
            finally:
                holder.execute("ROLLBACK")

        assert [r.run_id for r in await client.list_runs()] == [done.run_id]
        again = await client.start(healthy, 2)  # the lock is gone: it works again
        await stead.Worker(app, store).run_until_idle()
        assert await client.result(again.run_id, timeout=5) == 3
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("query", "says"),
    [("?busy_timeout=soon", "busy_timeout must be a number"),
     ("?busy_timeout=-1", "busy_timeout must be a number"),
     ("?busy_timeout=nan", "busy_timeout must be a number"),
     ("?bussy_timeout=1", "unknown option")],
)
@pytest.mark.sqlite_only
async def test_a_bad_url_option_is_a_clear_store_error(
    db_url: str, db_path: Path, query: str, says: str
) -> None:
    with pytest.raises(stead.StoreError, match=says):
        await stead.open_store(db_url + query)
    assert not db_path.exists()


@pytest.mark.sqlite_only
async def test_a_file_that_is_not_a_database_is_store_unavailable_and_left_alone(
    db_url: str, db_path: Path
) -> None:
    garbage = os.urandom(4096)
    db_path.write_bytes(garbage)
    with pytest.raises(stead.StoreUnavailable, match="not a database") as caught:
        await stead.open_store(db_url)
    assert str(db_path) in str(caught.value)
    assert db_path.read_bytes() == garbage


async def test_a_folder_that_does_not_exist_is_store_unavailable(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "folder"
    with pytest.raises(stead.StoreUnavailable, match="does not exist"):
        await stead.open_store(f"sqlite:///{missing}/stead.db")
    assert not (tmp_path / "no").exists()


async def test_unknown_run_ids_are_unknown_run(fstore: stead.Store) -> None:
    client = stead.Client(fstore, stead.App("t"))
    for call in (client.get, client.cancel, client.journal):
        with pytest.raises(stead.UnknownRun, match="no run 'nope'"):
            await call("nope")
    with pytest.raises(stead.UnknownRun):
        await client.result("nope", timeout=5)


class _Died(BaseException):
    pass


async def test_a_recorded_result_the_new_return_type_rejects_is_incompatible(
    db_url: str,
) -> None:
    clock = stead.FakeClock()
    store = await stead.open_store(db_url, clock=clock, lease_clock=clock)
    try:
        old = stead.App("t")

        def count_v1() -> str:
            return "many"

        @old.workflow(name="wf")
        async def wf_v1(run: stead.Run) -> None:
            await run.step("count", count_v1)
            raise _Died()  # dies without finishing: the lease stays held

        new = stead.App("t")

        def count_v2() -> int:
            return 3

        @new.workflow(name="wf")
        async def wf_v2(run: stead.Run) -> int:
            return await run.step("count", count_v2)

        client = stead.Client(store, old)
        info = await client.start(wf_v1)
        await stead.Worker(old, store).run_until_idle()
        clock.advance(3600)
        await stead.Worker(new, store).run_until_idle()
        got = await client.get(info.run_id)
        assert got.status == "incompatible_checkpoint"
        assert got.error is not None and "declared return type" in got.error["message"]
    finally:
        await store.close()
