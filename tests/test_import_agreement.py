"""An imported run's row must agree with its journal and waits
(`stead.agreement`): an export whose row says `completed`, with a result
nobody made, over a journal that still waits is refused, as is every other
row its history could not have; every real history imports, whatever shape
it has. A hypothesis property tampers with real exports and drives what it
accepts to its end: an accepted import never ends otherwise than its
untampered history does."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stead
from stead.records import RunStatus
from tests import stress
from tests.helpers import Crash

app = stead.App("agree")
died: set[str] = set()  # the orders whose effect's first attempt died already


@app.workflow()
async def order(run: stead.Run, item: str) -> Any:
    price = await run.step("price", lambda: {"item": item, "cents": 1200})
    approved = await (await run.wait("approval", bind={"item": item}))
    return {"price": price, "approved": approved}


@app.workflow()
async def nap(run: stead.Run) -> str:
    await run.sleep(3600)
    return str(await run.step("woke", lambda: "rested"))


@app.workflow()
async def boom(run: stead.Run) -> None:
    await run.step("try", lambda: 1)
    raise RuntimeError("the workflow gave up")


@app.workflow()
async def parent(run: stead.Run) -> Any:
    return await run.child(order, "pen", name="kid")


@app.workflow()
async def send(run: stead.Run, item: str) -> Any:
    def dies_once(op: stead.Operation) -> str:
        if item not in died:
            died.add(item)
            raise Crash()
        return f"sent {item}"

    return await run.effect("ship", dies_once)


@app.workflow()
async def unawaited(run: stead.Run) -> str:
    await run.wait("never", bind={})  # opened, never awaited: the run ends anyway
    return "done"


def _lease() -> stead.WorkerOptions:
    return stead.WorkerOptions(lease_seconds=30, poll_interval=0.01)


async def _settle(store: stead.Store) -> None:
    await stead.Worker(app, store, _lease()).run_until_idle()


async def _approve(client: stead.Client, run_id: str) -> None:
    for w in await client.store.list_waits(run_id=run_id):
        if w.state == "open":
            done = await client.deliver(
                run_id, event_id=uuid.uuid4().hex, wait_id=w.wait_id, kind=w.kind,
                bind=json.loads(w.bind), payload={"ok": True},
                operator=stead.Operator("t", "test"))
            assert isinstance(done, stead.Accepted), done


async def _histories(store: stead.Store, clock: stead.FakeClock) -> dict[str, str]:
    """Runs of every shape a history takes, by name: their ids."""
    client = stead.Client(store, app)
    runs = {
        "waiting": (await client.start("order", "book")).run_id,
        "completed": (await client.start("order", "cup")).run_id,
        "failed": (await client.start("boom")).run_id,
        "sleeping": (await client.start("nap")).run_id,
        "on_a_child": (await client.start("parent")).run_id,
        "cancelled": (await client.start("order", "hat")).run_id,
        "unknown": (await client.start("send", f"box-{uuid.uuid4().hex}")).run_id,
        "unawaited": (await client.start("unawaited")).run_id,
        "pending": (await client.start("order", "mug")).run_id,
    }
    pending = await store.get_run(runs["pending"])
    await store.cancel_run(runs["pending"])  # kept aside while the others run
    await _settle(store)
    clock.advance(31)  # the effect's first attempt died: a takeover stops it
    await _settle(store)
    await _approve(client, runs["completed"])
    await client.cancel(runs["cancelled"])
    await _settle(store)
    runs["fork"] = (await client.fork(runs["waiting"], at=2)).run_id  # its wait open
    runs["pending"] = (await client.start(pending.workflow, "mug")).run_id
    for name, status in (("waiting", "waiting"), ("completed", "completed"),
                         ("failed", "failed"), ("sleeping", "waiting"),
                         ("on_a_child", "waiting"), ("cancelled", "cancelled"),
                         ("unknown", "outcome_unknown"), ("unawaited", "completed"),
                         ("fork", "pending"), ("pending", "pending")):
        assert (await client.get(runs[name])).status == status, name
    return runs


def _renamed(data: dict[str, Any]) -> dict[str, Any]:
    """`data` as the export of a new run: the same history, importable beside it."""
    data = json.loads(json.dumps(data))
    run_id = uuid.uuid4().hex
    data["run"]["run_id"] = run_id
    data["run"]["task_id"] = None
    ids = {w["wait_id"]: uuid.uuid4().hex for w in data["waits"]}
    for w in data["waits"]:
        w["run_id"], w["wait_id"], w["task_key"] = run_id, ids[w["wait_id"]], f"run:{run_id}"
    for r in data["journal"]:
        payload = json.loads(r["payload"])
        if r["kind"] == "wait" and isinstance(payload, dict) and payload.get("wait_id") in ids:
            payload["wait_id"] = ids[payload["wait_id"]]
            r["payload"] = json.dumps(payload)
    if data["state"] is not None:
        data["state"]["task_key"] = f"run:{run_id}"
    return data


@pytest.fixture
async def exported(fstore: stead.Store, clock: stead.FakeClock
                   ) -> AsyncIterator[dict[str, dict[str, Any]]]:
    runs = await _histories(fstore, clock)
    client = stead.Client(fstore, app)
    yield {name: (await client.export_run(run_id)).to_json() for name, run_id in runs.items()}


async def test_every_shape_of_history_imports(
    exported: dict[str, dict[str, Any]], store: stead.Store,
) -> None:
    for name, data in exported.items():
        stored = stead.StoredRun.from_json(_renamed(data), source=name)
        info = await stead.Client(store).import_run(stored)
        assert info.status == data["run"]["status"], name


# -- what is refused, and says so --------------------------------------------------
def _completed_over_a_waiting_journal(d: dict[str, Any]) -> None:
    d["run"]["status"], d["run"]["result"] = "completed", '{"approved": true, "refund": 4200}'


def _completed_without_its_waits(d: dict[str, Any]) -> None:
    _completed_over_a_waiting_journal(d)
    d["waits"] = []


def _failed_without_an_error(d: dict[str, Any]) -> None:
    d["run"]["status"] = "failed"


def _cancelled_while_waiting(d: dict[str, Any]) -> None:
    d["run"]["status"] = "cancelled"


def _result_while_waiting(d: dict[str, Any]) -> None:
    d["run"]["result"] = '"made up"'


def _error_while_waiting(d: dict[str, Any]) -> None:
    d["run"]["error"] = '{"type": "Boom", "message": "made up"}'


def _waiting_for_nothing(d: dict[str, Any]) -> None:
    d["waits"][0]["state"], d["waits"][0]["event_id"] = "consumed", "e-1"


def _unknown_without_an_effect(d: dict[str, Any]) -> None:
    d["run"]["status"] = "outcome_unknown"
    d["run"]["error"] = json.dumps({"type": "OutcomeUnknown", "message": "m",
                                    "effect": "refund", "addr": "9", "key": "k"})


def _open_wait_the_journal_does_not_know(d: dict[str, Any]) -> None:
    d["waits"][0]["addr"] = "42"


def _never_claimed_with_a_journal(d: dict[str, Any]) -> None:
    d["run"]["status"], d["run"]["epoch"] = "pending", 0


def _waiting_but_never_claimed(d: dict[str, Any]) -> None:
    d["run"]["epoch"] = 0


def _record_of_no_claim(d: dict[str, Any]) -> None:
    d["journal"][0]["epoch"] = 0


def _pending_at_a_later_epoch(d: dict[str, Any]) -> None:
    d["run"]["status"], d["run"]["epoch"] = "pending", 3


def _another_tasks_wait(d: dict[str, Any]) -> None:
    d["waits"][0]["task_key"] = "order-999"


def _another_tasks_state(d: dict[str, Any]) -> None:
    d["state"] = {"task_key": "order-999", "version": 3, "data": '{"paid": true}',
                  "run_id": None, "updated_at": 1.0, "author": None, "why": None}


def _ended_but_never_claimed(d: dict[str, Any]) -> None:
    _completed_without_its_waits(d)
    d["journal"], d["run"]["epoch"] = [], 0


TAMPERED: dict[Callable[[dict[str, Any]], None], str] = {
    _ended_but_never_claimed: "the run is completed at epoch 0",
    _completed_over_a_waiting_journal: "the run is completed but wait \\w+ is open",
    _completed_without_its_waits: "opened wait '\\w+', which is not among the run's waits",
    _failed_without_an_error: "the run is failed but its error does not say what happened",
    _cancelled_while_waiting: "the run is cancelled but wait \\w+ is open",
    _result_while_waiting: "the run is waiting but has a result",
    _error_while_waiting: "the run is waiting but has an error",
    _waiting_for_nothing: "the run is waiting but waits for nothing",
    _unknown_without_an_effect: "outcome_unknown on effect 'refund' \\(at '9'\\), but the "
                                "journal holds no effect there",
    _open_wait_the_journal_does_not_know: "is open but the journal has no unresolved wait "
                                          "for it at '42'",
    _never_claimed_with_a_journal: "never claimed \\(epoch 0\\) but its journal holds",
    _waiting_but_never_claimed: "the run is waiting at epoch 0",
    _record_of_no_claim: "journal record 0 was written at epoch 0",
    _pending_at_a_later_epoch: "pending at epoch 3",
    _another_tasks_wait: "is bound to task 'order-999', not the run's",
    _another_tasks_state: "the task state is that of task 'order-999', not the run's",
}


@pytest.mark.parametrize("tamper", list(TAMPERED), ids=lambda f: f.__name__[1:])
async def test_a_row_its_journal_contradicts_is_refused_and_nothing_is_stored(
    exported: dict[str, dict[str, Any]], store: stead.Store,
    tamper: Callable[[dict[str, Any]], None],
) -> None:
    data = _renamed(exported["waiting"])
    tamper(data)
    with pytest.raises(stead.InvalidInput, match=TAMPERED[tamper]) as refused:
        stead.StoredRun.from_json(data, source="run.json")
    assert str(refused.value).startswith("run.json: ")
    assert "stead runs export RUN" in str(refused.value)
    with pytest.raises(stead.InvalidInput, match=TAMPERED[tamper]):
        await stead.Client(store).import_run(_built(data))
    with pytest.raises(stead.UnknownRun):
        await store.get_run(data["run"]["run_id"])


def _built(data: dict[str, Any]) -> stead.StoredRun:
    """`data` as a `StoredRun` built in code, unchecked."""
    from stead.records import Record, RunRow, StateRow, WaitRow

    return stead.StoredRun(RunRow(**data["run"]), tuple(Record(**r) for r in data["journal"]),
                           tuple(WaitRow(**w) for w in data["waits"]),
                           None if data["state"] is None else StateRow(**data["state"]))


# -- the property: a history that still waits is never accepted as ended -----------------
TERMINAL = {"completed", "failed", "cancelled", "revalidation_failed"}
# The histories whose waits show they had not ended: an approval still open.
UNFINISHED = ("waiting", "fork")


async def _finish(client: stead.Client, clock: stead.FakeClock, run_id: str) -> tuple[str, Any]:
    """Drive a run to its end as people and time would: approve what it
    waits for, let its timers pass, retry or resume it where it stopped, run
    workers. Its end: status and result."""
    for _ in range(8):
        await _settle(client.store)
        info = await client.get(run_id)
        if info.status in TERMINAL:
            return str(info.status), info.result
        if info.status == RunStatus.WAITING:
            await _approve(client, run_id)
            clock.advance(4000)
        elif info.status in (RunStatus.INCOMPATIBLE, RunStatus.OUTCOME_UNKNOWN):
            await client.retry(run_id)
        elif info.status == RunStatus.PAUSED:
            await client.resume(run_id, by="t", why="test")
    info = await client.get(run_id)
    return str(info.status), info.result


@st.composite
def _edits(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Edits of a run's row, as someone editing an export would."""
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["status", "status", "result", "error", "wake_at",
                                     "epoch"]))
        choices: dict[str, list[Any]] = {
            "status": sorted(RunStatus),
            "result": [None, '"made up"', '{"approved": true, "refund": 4200}'],
            "error": [None, '{"type": "Boom", "message": "made up"}', '"boom"'],
            "wake_at": [None, 1.0],
            "epoch": [0, 1, 2, 4],
        }
        edits.append((what, draw(st.sampled_from(choices[what]))))
    return edits


@pytest.mark.sqlite_only
async def test_a_history_that_still_waits_is_never_accepted_as_ended(
    exported: dict[str, dict[str, Any]], fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    # Whatever is made of its row, an accepted import of such a history is
    # one stead could have stored: driven on, it ends as the history does.
    client = stead.Client(fstore, app)
    ends = {name: await _imported_end(client, clock,
                                      stead.StoredRun.from_json(_renamed(exported[name])))
            for name in UNFINISHED}
    seen: dict[str, int] = {"accepted": 0, "refused": 0}
    loop = asyncio.get_running_loop()

    @settings(max_examples=stress.examples(60), deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(name=st.sampled_from(UNFINISHED), edits=_edits())
    def check(name: str, edits: list[tuple[str, Any]]) -> None:
        data = _renamed(exported[name])
        for what, value in edits:
            data["run"][what] = value
        try:
            stored = stead.StoredRun.from_json(data, source=name)
        except stead.InvalidInput:
            seen["refused"] += 1
            return
        assert stored.run.status not in TERMINAL, (name, edits)
        end = asyncio.run_coroutine_threadsafe(_imported_end(client, clock, stored), loop)
        assert end.result() == ends[name], (name, edits)
        seen["accepted"] += 1

    await asyncio.to_thread(check)
    assert seen["accepted"] and seen["refused"], seen


async def _imported_end(client: stead.Client, clock: stead.FakeClock,
                        stored: stead.StoredRun) -> tuple[str, Any]:
    info = await client.import_run(stored)
    return await _finish(client, clock, info.run_id)
