"""stead's side of the many-workers mode (`python -m bench --fleet`, see
bench/fleet.py), run in the project's venv as
`python -m bench.w_fleet '{"workload": ..., "url": ...}'`.

- `starts`: `client.start_many` of `runs` runs of `fleet_run` (3 steps, a
  payload of about 150 bytes in and out of each).
- `workers`: `workers` Workers in this process, each with its own worker id,
  its own lease keeper (its own renewal connection and presence lock, as a
  worker on a host of its own has) and `concurrency` slots; they share this
  process's store (its pool and its LISTEN connection). Says READY, starts on
  the parent's first line, stops on its second, and returns what it saw:
  each worker's claims (when, how long, how many runs), each live step's
  latency, each run's first live step here, the leases renewed (the
  `stead.lease.renewals` counter), and the process's CPU seconds.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

import stead
from bench import common
from stead.metrics import meters
from stead.records import RunRow
from stead.testing import DelegatingStore

app = stead.App("fleet-bench")
STEPS = 3
NOTE = "a small agent step's state: " + "x" * 100

# What ran live in this process: (run id, step) -> when the step function
# began; the workflow pops it to tell a live step from a replayed one.
_live: dict[tuple[str, int], float] = {}
# Each run's first live step in this process (a takeover's first step), or
# its end if it had none left (the killed worker ran its last step and died
# before it recorded the run's end: the takeover replays all and ends it).
first_live: dict[str, float] = {}
# Each live step, as the workflow saw it (call to durable return): (when it
# returned, milliseconds).
steps: list[tuple[float, float]] = []
finished_at: list[float] = []  # when each run's last step returned here


async def work(run_id: str, i: int, state: dict[str, Any]) -> dict[str, Any]:
    t = common.now()
    _live[(run_id, i)] = t
    first_live.setdefault(run_id, t)
    return {"n": state["n"] + 1, "note": state["note"]}


@app.workflow(version=1)
async def fleet_run(run: stead.Run, state: dict[str, Any]) -> dict[str, Any]:
    for i in range(STEPS):
        t0 = common.now()
        state = await run.step("work", work, run.id, i, state)
        if _live.pop((run.id, i), None) is not None:
            t1 = common.now()
            steps.append((t1, (t1 - t0) * 1000))
    end = common.now()
    first_live.setdefault(run.id, end)
    finished_at.append(end)
    return state


async def w_starts(job: dict[str, Any]) -> dict[str, Any]:
    store = await stead.open_store(job["url"])
    try:
        client = stead.Client(store, app)
        wanted = [stead.Start(fleet_run, [{"n": i, "note": NOTE}]) for i in range(job["runs"])]
        t0 = common.now()
        infos = await client.start_many(wanted, batch=1000)
        return {"seconds": common.now() - t0, "runs": len(infos)}
    finally:
        await store.close()


class Claims(DelegatingStore):
    """One worker's view of the shared store: times each of its claims."""

    def __init__(self, inner: stead.Store) -> None:
        super().__init__(inner)
        self.claims: list[tuple[float, float, int]] = []  # (at, ms, runs)

    async def claim(self, worker_id: str, hosted: Sequence[str], lease_seconds: float,
                    limit: int, exclude: Sequence[str] = ()) -> list[RunRow]:
        t0 = common.now()
        rows = await self.inner.claim(worker_id, hosted, lease_seconds, limit, exclude)
        self.claims.append((t0, (common.now() - t0) * 1000, len(rows)))
        return rows

    async def claim_unshared(self, worker_id: str, hosted: Sequence[str], lease_seconds: float,
                             limit: int, exclude: Sequence[str] = ()) -> Any:
        """The plain claim of a worker that shares nothing among tenants."""
        t0 = common.now()
        got = await self.inner.claim_unshared(worker_id, hosted, lease_seconds, limit, exclude)
        self.claims.append((t0, (common.now() - t0) * 1000, len(got.runs)))
        return got


def _renewals(reader: Any) -> dict[str, int]:
    """The `stead.lease.renewals` counter so far, by outcome."""
    out = {"renewed": 0, "lost": 0}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == "stead.lease.renewals":
                    for point in metric.data.data_points:
                        out[str(point.attributes.get("outcome"))] = int(point.value)
    return out


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


async def w_workers(job: dict[str, Any]) -> dict[str, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from stead.worker import leases

    # An experiment's knob: the lease keeper's intervals (seconds), by name.
    for name, seconds in job.get("intervals", {}).items():
        if name not in ("_DEAD_CHECK", "_PRESENCE_CHECK", "_CANCEL_CHECK"):
            raise ValueError(f"no interval {name!r}")
        setattr(leases, name, float(seconds))
    reader = InMemoryMetricReader()
    meters.instrument(meter_provider=MeterProvider(metric_readers=[reader]),
                      latency=meters.Latency())
    inner = await stead.open_store(job["url"])
    views = [Claims(inner) for _ in job["ids"]]
    workers = [stead.Worker(app, view, stead.WorkerOptions(
        concurrency=job["concurrency"], worker_id=worker_id))
        for view, worker_id in zip(views, job["ids"], strict=True)]
    loop = asyncio.get_running_loop()
    common.emit("READY", {"pid": os.getpid()})
    # Every line the parent sends marks a moment (its time, this process's CPU
    # and renewals so far): the first starts the workers, "stop" stops them.
    marks: list[dict[str, Any]] = []
    tasks: list[asyncio.Task[None]] = []
    while True:
        line = await loop.run_in_executor(None, input)
        renewals = _renewals(reader)
        marks.append({"at": common.now(), "cpu": _cpu(), **renewals})
        if not tasks:
            tasks = [asyncio.create_task(w.run()) for w in workers]
        if line.strip() == "stop":
            break
    for w in workers:
        w.stop()
    await asyncio.gather(*tasks)
    await inner.close()
    return {
        "pid": os.getpid(), "marks": marks,
        "claims": {wid: v.claims for wid, v in zip(job["ids"], views, strict=True)},
        "steps": steps, "first_live": first_live, "finished_at": finished_at,
    }


WORKLOADS = {"starts": w_starts, "workers": w_workers}


def main() -> None:
    job = common.args()
    out = asyncio.run(WORKLOADS[job["workload"]](job))
    common.result(out)


if __name__ == "__main__":
    main()
