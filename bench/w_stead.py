"""stead's side of every workload, run in the project's venv as
`python -m bench.w_stead '{"workload": ..., "url": ...}'`."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from bench import common

T_START = common.now()
import stead  # noqa: E402  (import time is part of what recovery measures)

T_IMPORTED = common.now()

app = stead.App("bench")
HANG = os.environ.get("BENCH_HANG") == "1"
step_times: list[float] = []


def noop(i: int) -> int:
    return i


probe_calls: list[tuple[float, int]] = []  # (when the function ran, on which thread)
probe_steps: list[tuple[float, float]] = []  # (before `await run.step`, after)


def noop_probed(i: int) -> int:
    """A sync step that notes when it ran, and on which thread."""
    probe_calls.append((common.now(), threading.get_native_id()))
    return i


def step_or_hang(i: int, n: int) -> int:
    """Step `n` of the recovery workload: the first process says it is there
    and waits to be SIGKILLed; the fresh process just records when it ran."""
    if i == n:
        step_times.append(common.now())
        if HANG:
            common.emit("READY", {"at": common.now()})
            time.sleep(3600)
    return i


@app.workflow(version=1)
async def seq(run: stead.Run, n: int) -> int:
    for i in range(n):
        await run.step("s", noop, i)
    return n


@app.workflow(version=1)
async def seq_probed(run: stead.Run, n: int) -> int:
    for i in range(n):
        before = common.now()
        await run.step("s", noop_probed, i)
        probe_steps.append((before, common.now()))
    return n


async def anoop(i: int) -> int:
    return i


@app.workflow(version=1)
async def seq_async(run: stead.Run, n: int) -> int:
    for i in range(n):
        await run.step("s", anoop, i)
    return n


@app.workflow(version=1)
async def small(run: stead.Run, i: int) -> int:
    a = await run.step("a", noop, i)
    b = await run.step("b", noop, a)
    return await run.step("c", noop, b)


entries: list[float] = []


@app.workflow(version=1)
async def recover(run: stead.Run, n: int) -> int:
    entries.append(common.now())
    for i in range(n + 1):
        await run.step("s", step_or_hang, i, n)
    return n


class Chat:
    """A model that answers every conversation with a 1 KB message."""

    name = "bench-chat"

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], **params: Any
    ) -> stead.Completion:
        step_times.append(common.now())
        return stead.Completion(text=common.message(len(messages)), model=self.name)


@app.workflow(version=1)
async def growth(run: stead.Run, n: int, feed: bool = True) -> int:
    """An agent loop: the whole conversation goes to the model at every turn
    (with `feed=False` it does not, to time the storage path alone)."""
    model = Chat()
    history: list[dict[str, str]] = []
    for _ in range(n):
        reply = await run.llm("chat", model, history if feed else [])
        history.append({"role": "assistant", "content": reply.text})
    return len(history)


# When the idle worker's waits for news of work returned (see w_waits_worker).
noticed: list[float] = []


# In w_waits_inproc: the deliverer's futures, each told when its run woke.
woken: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[float]]] = {}


def woke(run_id: str) -> str:
    at = common.now()
    told = woken.pop(run_id, None)
    if told is not None:  # a sync step: on the loop or in a thread, either way
        loop, fut = told
        loop.call_soon_threadsafe(fut.set_result, at)
        return run_id
    common.emit("WOKE", {"run_id": run_id, "at": at,
                         "noticed": noticed[-1] if noticed else None})
    return run_id


@app.workflow(version=1)
async def approval(run: stead.Run) -> str:
    w = await run.wait("approval", token=False)
    event = await w
    await run.step("after", woke, run.id)
    return str(event)


# -- workloads ------------------------------------------------------------------------
async def w_seq(job: dict[str, Any]) -> dict[str, Any]:
    trace = common.SqliteTrace()
    if job.get("count"):
        trace.install()
    n = job["n"]
    store = await stead.open_store(job["url"])
    client = stead.Client(store, app)
    await client.start(seq, n)
    worker = stead.Worker(app, store, stead.WorkerOptions(concurrency=1))
    c0, (s0, k0) = store.commits, trace.snapshot()
    t0 = common.now()
    await worker.run_until_idle()
    elapsed = common.now() - t0
    c1, (s1, k1) = store.commits, trace.snapshot()
    await store.close()
    return {"seconds": elapsed, "store_commits": c1 - c0,
            "sqlite_statements": s1 - s0, "sqlite_commits": k1 - k0}


async def w_seq_parts(job: dict[str, Any]) -> dict[str, Any]:
    """Where a sequential step's time goes: the same run with an async step
    function (no thread hop for the user function), and the bare store round
    trip (one fenced `append` of one record) with no workflow at all."""
    from stead.records import Fence  # internal: a diagnostic, not an API use

    n = job["n"]
    store = await stead.open_store(job["url"])
    client = stead.Client(store, app)
    await client.start(seq_async, n)
    worker = stead.Worker(app, store, stead.WorkerOptions(concurrency=1))  # imported untimed
    t0 = common.now()
    await worker.run_until_idle()
    async_step = common.now() - t0
    info = await client.start(seq, 0)
    (row,) = await store.claim("bench", [seq.key], 60, 1)
    fence = Fence(info.run_id, row.epoch, "bench")
    t0 = common.now()
    for i in range(n):
        await store.append(fence, [stead.Record(
            seq=i, addr=str(i), attempt=1, kind="step", name="s", digest="0" * 32,
            status="ok", payload=str(i), epoch=row.epoch, at=time.time())])
    append = common.now() - t0
    await store.close()
    return {"async_step_us": async_step / n * 1e6, "append_us": append / n * 1e6}


async def w_seq_probe(job: dict[str, Any]) -> dict[str, Any]:
    """Where a sync step's time goes: per step, the workflow's `await
    run.step` → the function running (on its thread) → the step back in the
    workflow, its record committed; and the context switches of every thread
    of the process over the run (/proc/self/task/*/status), by thread."""
    if job.get("switch_interval"):
        sys.setswitchinterval(job["switch_interval"])
    n = job["n"]
    store = await stead.open_store(job["url"])
    client = stead.Client(store, app)
    await client.start(seq_probed, n)
    worker = stead.Worker(app, store, stead.WorkerOptions(concurrency=1))
    probe_calls.clear()
    probe_steps.clear()
    before = common.context_switches()
    t0 = common.now()
    await worker.run_until_idle()
    elapsed = common.now() - t0
    after = common.context_switches()
    names = {t.native_id: t.name for t in threading.enumerate()}
    await store.close()
    pairs = list(zip(probe_calls, probe_steps, strict=True))
    loop_tid = threading.main_thread().native_id
    switches: dict[str, list[int]] = {}
    for tid, (vol, invol) in after.items():
        was = before.get(tid, (0, 0))
        name = "loop" if tid == loop_tid else names.get(tid) or "other"
        got = switches.setdefault(name.rstrip("0123456789-"), [0, 0])
        got[0] += vol - was[0]
        got[1] += invol - was[1]
    return {
        "seconds": elapsed,
        # Means, not medians: under load the time is in the tail.
        "to_fn_us": statistics.fmean((c[0] - s[0]) * 1e6 for c, s in pairs),
        "back_us": statistics.fmean((s[1] - c[0]) * 1e6 for c, s in pairs),
        "inline_calls": sum(1 for c, _ in pairs if c[1] == loop_tid),
        "switches_per_step": {k: [v[0] / n, v[1] / n] for k, v in switches.items()},
    }


async def w_many(job: dict[str, Any]) -> dict[str, Any]:
    store = await stead.open_store(job["url"])
    client = stead.Client(store, app)
    t0 = common.now()
    for i in range(job["runs"]):
        await client.start(small, i)
    t1 = common.now()
    c1, cpu1 = store.commits, time.process_time()
    worker = stead.Worker(app, store, stead.WorkerOptions(concurrency=job["concurrency"]))
    await worker.run_until_idle()
    t2 = common.now()
    c2, cpu2 = store.commits, time.process_time()
    done = await store.list_runs(status="completed", limit=job["runs"] + 1)
    await store.close()
    return {"start_seconds": t1 - t0, "exec_seconds": t2 - t1, "seconds": t2 - t0,
            "completed": len(done), "exec_commits": c2 - c1, "exec_cpu_seconds": cpu2 - cpu1}


async def w_recover_prepare(job: dict[str, Any]) -> dict[str, Any]:
    store = await stead.open_store(job["url"])
    client = stead.Client(store, app)
    info = await client.start(recover, job["n"])
    common.emit("RUN", {"run_id": info.run_id})
    # A short lease, so the fresh process can take the run over soon after the kill.
    await stead.Worker(app, store, stead.WorkerOptions(
        concurrency=1, lease_seconds=job["lease_seconds"])).run_until_idle()
    return {}


async def w_recover(job: dict[str, Any]) -> dict[str, Any]:
    store = await stead.open_store(job["url"])
    t_ready = common.now()
    worker = stead.Worker(app, store, stead.WorkerOptions(concurrency=1))
    await worker.run_until_idle()
    t_done = common.now()
    info = await stead.Client(store, app).get(job["run_id"])
    journal = await store.load_journal(job["run_id"])
    await store.close()
    return {"t_imported": T_IMPORTED, "t_ready": t_ready, "t_entry": entries[0],
            "t_live": step_times[0], "t_done": t_done, "status": info.status,
            "result": info.result, "journal": len(journal)}


async def w_growth(job: dict[str, Any]) -> dict[str, Any]:
    store = await stead.open_store(job["url"])
    client = stead.Client(store, app)
    await client.start(growth, 0)  # schema, first run row: not the growth
    await stead.Worker(app, store).run_until_idle()
    before = common.used_bytes(job["url"])
    step_times.clear()
    info = await client.start(growth, job["n"], job.get("feed", True))
    t0 = common.now()
    await stead.Worker(app, store, stead.WorkerOptions(concurrency=1)).run_until_idle()
    elapsed = common.now() - t0
    after = common.used_bytes(job["url"])
    status = (await client.get(info.run_id)).status
    await store.close()
    return {"bytes": after - before, "seconds": elapsed, "step_times": step_times,
            "status": status}


async def w_waits_setup(job: dict[str, Any]) -> dict[str, Any]:
    """Start `runs` runs that each open a wait; one worker takes each to its
    wait and suspends it."""
    store = await stead.open_store(job["url"])
    client = stead.Client(store, app)
    before = common.used_bytes(job["url"])
    t0 = common.now()
    ids = [(await client.start(approval)).run_id for _ in range(job["runs"])]
    t1 = common.now()
    await stead.Worker(app, store, stead.WorkerOptions(concurrency=32)).run_until_idle()
    t2 = common.now()
    waiting = await store.list_runs(status="waiting", limit=job["runs"] + 1)
    after = common.used_bytes(job["url"])
    await store.close()
    return {"start_seconds": t1 - t0, "suspend_seconds": t2 - t1, "waiting": len(waiting),
            "bytes": after - before, "run_ids": ids, "rss": common.rss_bytes()}


async def w_waits_worker(job: dict[str, Any]) -> dict[str, Any]:
    """An idle worker (default options) that prints WOKE for each woken run."""
    store = await stead.open_store(job["url"])
    # A diagnostic: note when the store told the idle worker of news, to split
    # a wake-up into noticing the delivery and resuming the run.
    watch = store.database.wait_for_work

    async def watched(timeout: float, **how: Any) -> None:
        await watch(timeout, **how)  # its `ring` and `since` too: see `Store.wait_for_work`
        noticed.append(common.now())

    store.database.wait_for_work = watched  # type: ignore[method-assign]
    if job.get("poll_only"):  # the A/B: no -wal watch, the 10 ms look alone
        store.database._wal_tried = True
    worker = stead.Worker(app, store)
    task = asyncio.create_task(worker.run())
    common.emit("IDLE", {"pid": os.getpid()})
    await asyncio.get_running_loop().run_in_executor(None, input)  # parent says stop
    worker.stop()
    await task
    await store.close()
    return {}


async def w_waits_inproc(job: dict[str, Any]) -> dict[str, Any]:
    """The client and an idle worker (default options) in one process, as an
    embedded app runs: each delivery made here, timed until its run's next
    step runs in the worker."""
    store = await stead.open_store(job["url"])
    client = stead.Client(store, app)
    worker = stead.Worker(app, store)
    task = asyncio.create_task(worker.run())
    loop = asyncio.get_running_loop()
    await asyncio.sleep(1.0)  # settled into its idle loop
    latencies: list[float] = []
    for i, run_id in enumerate(job["run_ids"]):
        await asyncio.sleep(job["gaps"][i])
        fut: asyncio.Future[float] = loop.create_future()
        woken[run_id] = (loop, fut)
        t = common.now()
        verdict = await client.deliver(run_id, event_id=f"e-{run_id}", kind="approval",
                                       payload={"ok": True})
        if not isinstance(verdict, stead.Accepted):
            raise SystemExit(f"delivery to {run_id} was not accepted: {verdict}")
        latencies.append((await asyncio.wait_for(fut, 60) - t) * 1000)
    worker.stop()
    await task
    await store.close()
    return {"latencies": latencies}


async def w_deliver(job: dict[str, Any]) -> dict[str, Any]:
    store = await stead.open_store(job["url"])
    client = stead.Client(store, app)
    sent: dict[str, float] = {}
    returned: dict[str, float] = {}
    for i, run_id in enumerate(job["run_ids"]):
        await asyncio.sleep(job["gaps"][i])
        t = common.now()
        verdict = await client.deliver(run_id, event_id=f"e-{run_id}", kind="approval",
                                       payload={"ok": True})
        if not isinstance(verdict, stead.Accepted):
            raise SystemExit(f"delivery to {run_id} was not accepted: {verdict}")
        sent[run_id] = t
        returned[run_id] = common.now()
    await store.close()
    return {"sent": sent, "returned": returned}


WORKLOADS = {
    "seq": w_seq, "seq_parts": w_seq_parts, "seq_probe": w_seq_probe, "many": w_many,
    "recover_prepare": w_recover_prepare, "recover": w_recover,
    "growth": w_growth, "waits_setup": w_waits_setup, "waits_worker": w_waits_worker,
    "deliver": w_deliver, "waits_inproc": w_waits_inproc,
}


def main() -> None:
    job = common.args()
    out = asyncio.run(WORKLOADS[job["workload"]](job))
    common.result({**out, "t_start": T_START})


if __name__ == "__main__":
    main()
