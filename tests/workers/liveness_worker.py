"""A real worker process for the liveness tests (tests/test_liveness_processes.py).

    python liveness_worker.py --db URL --dir DIR --worker-id ID [--lease 30]
        [--concurrency 4]

Its workflow `charge` runs steps that take a while and an effect whose send
takes `send_seconds` (a payment in flight) with a `check=` that reads the
payee's ledger. What the outside world sees lands in DIR: `steps.log` gets
"<run_id> <step> <worker>" per step call, `sent.log` "<key> <worker>" when a
send starts and `ledger.log` "<key> <worker>" when the payee accepts it, so a
test can count what ran twice and who ran it. SIGTERM stops it gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
from pathlib import Path

import stead

app = stead.App("liveness")


class _Config:
    dir: Path
    worker: str


CONFIG = _Config()


def _append(name: str, line: str) -> None:
    """One write(2) on an O_APPEND descriptor: lines from threads never interleave."""
    fd = os.open(CONFIG.dir / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _ledger() -> dict[str, str]:
    path = CONFIG.dir / "ledger.log"
    if not path.exists():
        return {}
    return dict(line.split(" ", 1) for line in path.read_text().splitlines() if line)


async def work(run_id: str, name: str, seconds: float) -> str:
    _append("steps.log", f"{run_id} {name} {CONFIG.worker}")
    await asyncio.sleep(seconds)
    return name


def send(op: stead.Operation, run_id: str, seconds: float) -> dict[str, str]:
    """The payment: it is in flight for `seconds`, then the payee has it."""
    _append("sent.log", f"{op.key} {CONFIG.worker}")
    time.sleep(seconds)
    _append("ledger.log", f"{op.key} {CONFIG.worker}")
    return {"paid": op.key}


def find(op: stead.Operation) -> stead.Outcome:
    """The payee's own answer: done once the payment landed, else not found."""
    if op.key in _ledger():
        return stead.Outcome.done({"paid": op.key})
    return stead.Outcome.not_found()


@app.workflow(version=1)
async def charge(run: stead.Run, steps: int, step_seconds: float,
                 send_seconds: float) -> list[str]:
    done = []
    for i in range(steps):
        done.append(await run.step(f"s{i}", work, run.id, f"s{i}", step_seconds))
        if i == steps // 2:
            await run.effect("pay", send, run.id, send_seconds, check=find)
    return done


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--dir", required=True, type=Path)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--lease", type=float, default=30.0)
    p.add_argument("--concurrency", type=int, default=4)
    args = p.parse_args()
    CONFIG.dir, CONFIG.worker = args.dir, args.worker_id
    store = await stead.open_store(args.db)
    worker = stead.Worker(app, store, stead.WorkerOptions(
        worker_id=args.worker_id, lease_seconds=args.lease, concurrency=args.concurrency,
        poll_interval=0.1))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    try:
        await worker.run()
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
