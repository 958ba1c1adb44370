"""A worker process for the PostgreSQL scale-out test (tests/test_postgres_scale.py).

    python pg_scale_worker.py --db URL --logs DIR --worker-id ID [--lease 4] [--concurrency 8]

What it does is written to files in DIR, one line per event, with one
write(2) on an O_APPEND descriptor each (lines of processes never interleave):

- steps.log:  "<run_id> <step> <worker_id>" every time a step function runs;
- ledger.log: "<run_id> <key> <worker_id> <amount>" every time the charge effect is
  sent: the outside world (a payment provider) that must see each order
  charged once; the effect's `check` looks its key up there;
- claims.log: "<worker_id> <run_id> <epoch>" for every run a claim returned.

SIGTERM stops it gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import stead
from stead.records import RunRow
from stead.testing import DelegatingStore

app = stead.App("scale")


class _Config:
    logs: Path
    worker_id: str


CONFIG = _Config()


def _append(name: str, line: str) -> None:
    fd = os.open(CONFIG.logs / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def step(run_id: str, name: str, value: int) -> int:
    _append("steps.log", f"{run_id} {name} {CONFIG.worker_id}")
    return value


async def charge(op: stead.Operation, run_id: str, amount: int) -> str:
    _append("ledger.log", f"{run_id} {op.key} {CONFIG.worker_id} {amount}")
    return f"receipt-{amount}"


def find_charge(op: stead.Operation) -> stead.Outcome:
    path = CONFIG.logs / "ledger.log"
    lines = path.read_text().splitlines() if path.exists() else []
    for line in lines:
        _run_id, key, _worker, amount = line.split()
        if key == op.key:
            return stead.Outcome.done(f"receipt-{amount}")
    return stead.Outcome.not_found()


@app.workflow(version=1)
async def order(run: stead.Run, k: int) -> dict[str, Any]:
    base = await run.step("load", step, run.id, "load", k)
    price, stock = await asyncio.gather(
        run.step("price", step, run.id, "price", base * 10),
        run.step("stock", step, run.id, "stock", base + 1),
    )
    receipt: str = await run.effect("charge", charge, run.id, price, check=find_charge)
    shipped = await run.step("ship", step, run.id, "ship", stock)
    return {"k": k, "price": price, "stock": shipped, "charged": receipt.startswith("receipt-")}


class ClaimLog(DelegatingStore):
    async def claim(
        self, worker_id: str, hosted: Sequence[str], lease_seconds: float, limit: int,
        exclude: Sequence[str] = (),
    ) -> list[RunRow]:
        rows = await self.inner.claim(worker_id, hosted, lease_seconds, limit, exclude)
        for row in rows:
            _append("claims.log", f"{worker_id} {row.run_id} {row.epoch}")
        return rows


async def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--logs", required=True, type=Path)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--lease", type=float, default=4.0)
    p.add_argument("--concurrency", type=int, default=8)
    args = p.parse_args(argv)
    CONFIG.logs = args.logs
    CONFIG.worker_id = args.worker_id

    inner = await stead.open_store(args.db)
    worker = stead.Worker(app, ClaimLog(inner), stead.WorkerOptions(
        concurrency=args.concurrency, lease_seconds=args.lease, poll_interval=0.2,
        worker_id=args.worker_id,
    ))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    _append("events.log", f"ready {args.worker_id}")
    try:
        await worker.run()
    finally:
        await inner.close()


if __name__ == "__main__":
    asyncio.run(main())
