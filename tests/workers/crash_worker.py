"""A real worker process for the crash and lease-race tests.

    python crash_worker.py --db URL --counter FILE --model-log FILE [--events FILE]
        [--gate FILE]
        [--crash before:N[:name] | --crash after:N[:name]] [--kill-in-step part1:part0]
        [--lease 1.0] [--grace 10] [--until-done] [--worker-id ID]
        [--concurrency N] [--wait-for-gate]

Every step function appends "<run_id> <step>" to the counter file and every
model call appends a line to the model log, so the test can count what ran.
It uses the Python API only (not the CLI): SIGTERM stops the worker gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import stead
from stead.records import RunRow, RunStatus
from stead.testing import CrashingStore, CrashPoint, DelegatingStore, kill_process

app = stead.App("crash-tests")


class _Config:
    counter: Path
    model_log: Path
    events: Path | None = None
    gate: Path | None = None
    kill_in_step: tuple[str, str] | None = None
    store: stead.Store


CONFIG = _Config()


def _append(path: Path, line: str) -> None:
    """One write(2) on an O_APPEND descriptor: lines from threads never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def tick(run_id: str, name: str) -> None:
    _append(CONFIG.counter, f"{run_id} {name}")


def event(text: str) -> None:
    if CONFIG.events is not None:
        _append(CONFIG.events, text)


class CountingModel:
    """A model with a fixed answer that logs every time it is asked."""

    name = "counting"

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], **params: Any
    ) -> stead.Completion:
        prompt = str(messages[-1]["content"])
        _append(CONFIG.model_log, prompt)
        return stead.Completion(text=f"plan<{prompt}>", model=self.name, stop_reason="end")


MODEL = CountingModel()


# -- pipeline: the crash tests ------------------------------------------------
def fetch(run_id: str, n: int) -> int:  # sync: runs in a thread
    tick(run_id, "fetch")
    return n * 10


async def part(run_id: str, base: int, i: int) -> int:
    name = f"part{i}"
    if CONFIG.kill_in_step is not None and CONFIG.kill_in_step[0] == name:
        # Die mid-call, but only once the sibling's record is durable.
        sibling = CONFIG.kill_in_step[1]
        while not any(r.name == sibling for r in await CONFIG.store.load_journal(run_id)):
            await asyncio.sleep(0.01)
        tick(run_id, name)
        kill_process()
    tick(run_id, name)
    if i > 0 and CONFIG.gate is not None:
        # Siblings stay in flight until the test opens the gate.
        while not CONFIG.gate.exists():
            await asyncio.sleep(0.01)
    return base + i


def combine(run_id: str, parts: list[int], plan: str) -> int:
    tick(run_id, "combine")
    return sum(parts) + len(plan)


@app.workflow(version=1)
async def pipeline(run: stead.Run, n: int) -> dict[str, Any]:
    base = await run.step("fetch", fetch, run.id, n)
    plan = await run.llm("plan", MODEL, [{"role": "user", "content": f"plan {base}"}])
    parts = await asyncio.gather(*(run.step(f"part{i}", part, run.id, base, i) for i in range(3)))
    run.now()  # recorded; rides along with the next write
    total = await run.step("combine", combine, run.id, parts, plan.text)
    return {"base": base, "plan": plan.text, "parts": parts, "total": total}


# -- approved: a wait's event, then a step ----------------------------------------
def after(run_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    tick(run_id, "after")
    return payload


@app.workflow(version=1)
async def approved(run: stead.Run) -> dict[str, Any]:
    event = await (await run.wait("approval", token=False))
    return await run.step("after", after, run.id, event)


# -- slow: the SIGTERM tests ----------------------------------------------------
def first(run_id: str) -> str:
    tick(run_id, "first")
    return "first"


async def gated(run_id: str) -> str:
    tick(run_id, "gated")
    while CONFIG.gate is not None and not CONFIG.gate.exists():
        await asyncio.sleep(0.01)
    return "gated"


def last(run_id: str) -> str:
    tick(run_id, "last")
    return "last"


@app.workflow(version=1)
async def slow(run: stead.Run) -> list[str]:
    return [
        await run.step("first", first, run.id),
        await run.step("gated", gated, run.id),
        await run.step("last", last, run.id),
    ]


# -- chain: the two-process race ----------------------------------------------
def add(run_id: str, name: str, x: int, y: int) -> int:
    tick(run_id, name)
    return x + y


@app.workflow(version=1)
async def chain(run: stead.Run, k: int) -> int:
    a = await run.step("a", add, run.id, "a", k, 1)
    b, c = await asyncio.gather(
        run.step("b", add, run.id, "b", a, 2), run.step("c", add, run.id, "c", a, 3)
    )
    return await run.step("d", add, run.id, "d", b, c)


# -- lonely: one call at a time, a step that kills its worker ------------------
async def _until_renewed(run_id: str, name: str) -> None:
    """Wait until a lease renewal of this worker stored this step's started
    marker with the run (nothing else of the run commits while it is in
    flight); a marker of an earlier holder may still be there before."""
    while True:
        row = await CONFIG.store.get_run(run_id)
        if any(m["name"] == name and m["epoch"] == row.epoch
               for m in json.loads(row.in_flight or "[]")):
            return
        await asyncio.sleep(0.02)


async def lasting(run_id: str, name: str) -> str:
    """A step longer than one lease renewal."""
    tick(run_id, name)
    await _until_renewed(run_id, name)
    return name


async def doomed(run_id: str, kills: int) -> str:
    """Kills its worker, mid-flight and after a renewal, its first `kills` times."""
    tick(run_id, "doomed")
    if sum(1 for line in CONFIG.counter.read_text().splitlines()
           if line == f"{run_id} doomed") <= kills:
        await _until_renewed(run_id, "doomed")
        kill_process()
    return "survived"


@app.workflow(version=1)
async def lonely(run: stead.Run, kills: int, attempts: int) -> dict[str, Any]:
    """A lasting step, then `doomed`, under `Retry(attempts)` (0: no retry=)."""
    before = await run.step("before", lasting, run.id, "before")
    retry = stead.Retry(attempts=attempts, backoff=0) if attempts else None
    try:
        outcome = await run.step("doomed", doomed, run.id, kills, retry=retry)
    except stead.StepError as exc:
        outcome = f"{exc.error_type} after {exc.attempts}"
    return {"before": before, "doomed": outcome}


# -- looping: continue-as-new across crashes ------------------------------------
@app.workflow(version=1)
async def looping(run: stead.Run, turn: int, total: int, every: int) -> dict[str, Any]:
    """One step a turn; every `every` turns the run goes on as a new one."""
    while turn < total:
        await run.step("turn", add, run.id, f"turn{turn}", turn, 1)
        turn += 1
        if turn % every == 0 and turn < total:
            await run.continue_as_new(turn, total, every)
    return {"turns": turn}
# -- family: a child started once across a crash -----------------------------
@app.workflow(version=1)
async def leaf(run: stead.Run, parent_id: str, i: int) -> int:
    return await run.step("leaf", add, parent_id, f"leaf{i}", i, 100)


@app.workflow(version=1)
async def family(run: stead.Run, n: int) -> list[int]:
    kids = (run.child(leaf, run.id, i, name=f"leaf{i}") for i in range(n))
    return list(await asyncio.gather(*kids))


# -- main ---------------------------------------------------------------------
class ClaimLog(DelegatingStore):
    """Notes every claim in the events file: "claim <worker> <run_id> <epoch>"."""

    async def claim(
        self, worker_id: str, hosted: Sequence[str], lease_seconds: float, limit: int,
        exclude: Sequence[str] = (),
    ) -> list[RunRow]:
        rows = await self.inner.claim(worker_id, hosted, lease_seconds, limit, exclude)
        for row in rows:
            event(f"claim {worker_id} {row.run_id} {row.epoch}")
        return rows


def crash_point(text: str) -> CrashPoint:
    """`before:3`, `after:1:part0` -> a CrashPoint."""
    when, number, *name = text.split(":", 2)  # a name may hold colons
    n = int(number)
    step = name[0] if name else None
    if when == "before":
        return CrashPoint(before_commit=n, name=step)
    if when == "after":
        return CrashPoint(after_commit=n, name=step)
    raise SystemExit(f"bad --crash {text!r}: use before:N[:name] or after:N[:name]")


async def until_done(store: stead.Store, worker: stead.Worker) -> None:
    """Stop the worker once no run is pending or running. One read counts
    both: read one status after the other, a continue-as-new committing in
    between (its run leaves running, its successor enters pending) slips
    past both reads and the worker stopped with the successor pending."""
    while True:
        counts = await store.count_runs()
        if not counts.get(RunStatus.PENDING) and not counts.get(RunStatus.RUNNING):
            worker.stop()
            return
        await asyncio.sleep(0.05)


async def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--counter", required=True, type=Path)
    p.add_argument("--model-log", required=True, type=Path)
    p.add_argument("--events", type=Path)
    p.add_argument("--gate", type=Path, help="part1, part2 and gated wait until this file exists")
    p.add_argument("--crash")
    p.add_argument("--kill-in-step")
    p.add_argument("--lease", type=float, default=1.0)
    p.add_argument("--grace", type=float, default=10.0)
    p.add_argument("--until-done", action="store_true")
    p.add_argument("--wait-for-gate", action="store_true", help="start work once the gate opens")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--worker-id")
    args = p.parse_args(argv)

    CONFIG.counter = args.counter
    CONFIG.model_log = args.model_log
    CONFIG.events = args.events
    CONFIG.gate = args.gate
    if args.kill_in_step:
        victim, sibling = args.kill_in_step.split(":")
        CONFIG.kill_in_step = (victim, sibling)

    inner = await stead.open_store(args.db)
    CONFIG.store = inner
    store: stead.Store = inner
    if args.crash:
        store = CrashingStore(store, crash_point(args.crash))
    store = ClaimLog(store)
    worker = stead.Worker(app, store, stead.WorkerOptions(
        concurrency=args.concurrency, lease_seconds=args.lease, poll_interval=0.05,
        shutdown_grace=args.grace, worker_id=args.worker_id,
    ))

    def on_sigterm() -> None:
        event("stopping")
        worker.stop()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    watcher = asyncio.create_task(until_done(inner, worker)) if args.until_done else None
    event(f"ready {worker.id}")
    try:
        while args.wait_for_gate and not (CONFIG.gate is not None and CONFIG.gate.exists()):
            await asyncio.sleep(0.01)
        await worker.run()
    finally:
        if watcher is not None:
            watcher.cancel()
        await inner.close()
    event("stopped")


if __name__ == "__main__":
    asyncio.run(main())
