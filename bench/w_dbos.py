"""DBOS's side of the workloads, run in bench/.venv-peers as
`python -m bench.w_dbos '{"workload": ..., "url": ...}'`.

On SQLite, DBOS as shipped leaves the database in SQLite's default rollback
journal mode; `"wal": true` switches the file to WAL before DBOS opens it
(journal_mode=WAL is persistent). Both use SQLite's default synchronous=FULL.
On PostgreSQL it runs as shipped (synchronous_commit=on, LISTEN/NOTIFY).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from typing import Any

from bench import common

T_START = common.now()
from dbos import DBOS, DBOSClient, SetWorkflowID  # noqa: E402

T_IMPORTED = common.now()

HANG = os.environ.get("BENCH_HANG") == "1"
step_times: list[float] = []
entries: list[float] = []


@DBOS.step()
def noop(i: int) -> int:
    return i


@DBOS.workflow()
def seq(n: int) -> int:
    for i in range(n):
        noop(i)
    return n


@DBOS.workflow()
def small(i: int) -> int:
    return noop(noop(noop(i)))


@DBOS.step()
def step_or_hang(i: int, n: int) -> int:
    if i == n:
        step_times.append(common.now())
        if HANG:
            common.emit("READY", {"at": common.now()})
            time.sleep(3600)
    return i


@DBOS.workflow()
def recover(n: int) -> int:
    entries.append(common.now())
    for i in range(n + 1):
        step_or_hang(i, n)
    return n


@DBOS.step()
def chat(history: list[dict[str, str]]) -> str:
    step_times.append(common.now())
    return common.message(len(history))


@DBOS.workflow()
def growth(n: int) -> int:
    history: list[dict[str, str]] = []
    for _ in range(n):
        history.append({"role": "assistant", "content": chat(history)})
    return len(history)


waiting = 0


@DBOS.step()
async def woke(wfid: str) -> str:
    common.emit("WOKE", {"run_id": wfid, "at": common.now()})
    return wfid


@DBOS.workflow()
async def approval() -> str:
    """A workflow waiting for one message (DBOS's analogue of a wait)."""
    global waiting
    waiting += 1
    message = await DBOS.recv_async("approval", timeout_seconds=7 * 86400)
    await woke(DBOS.workflow_id or "")
    return str(message)


def launch(job: dict[str, Any]) -> None:
    url = job["url"]
    if url.startswith("sqlite") and job.get("wal"):
        conn = sqlite3.connect(common.sqlite_path(url))
        conn.execute("PRAGMA journal_mode=WAL")
        conn.close()
    DBOS(config={"name": "bench", "system_database_url": url, "log_level": "WARNING"})
    DBOS.launch()


def w_seq(job: dict[str, Any]) -> dict[str, Any]:
    trace = common.SqliteTrace()
    if job.get("count"):
        trace.install()
    launch(job)
    s0, k0 = trace.snapshot()
    t0 = common.now()
    DBOS.start_workflow(seq, job["n"]).get_result()
    elapsed = common.now() - t0
    s1, k1 = trace.snapshot()
    DBOS.destroy()
    return {"seconds": elapsed, "sqlite_statements": s1 - s0, "sqlite_commits": k1 - k0}


def w_many(job: dict[str, Any]) -> dict[str, Any]:
    launch(job)
    queue = DBOS.register_queue("bench", worker_concurrency=job["concurrency"],
                                polling_interval_sec=job["poll"])
    t0 = common.now()
    handles = [queue.enqueue(small, i) for i in range(job["runs"])]
    t1 = common.now()
    done = sum(1 for h in handles if h.get_result() is not None)
    t2 = common.now()
    DBOS.destroy()
    return {"start_seconds": t1 - t0, "exec_seconds": t2 - t1, "seconds": t2 - t0,
            "completed": done}


def w_recover_prepare(job: dict[str, Any]) -> dict[str, Any]:
    launch(job)
    with SetWorkflowID("recover-1"):
        DBOS.start_workflow(recover, job["n"])
    common.emit("RUN", {"run_id": "recover-1"})
    time.sleep(3600)
    return {}


def w_recover(job: dict[str, Any]) -> dict[str, Any]:
    launch(job)  # recovers this executor's pending workflows
    t_ready = common.now()
    result = DBOS.retrieve_workflow(job["run_id"]).get_result()
    t_done = common.now()
    DBOS.destroy()
    return {"t_imported": T_IMPORTED, "t_ready": t_ready, "t_entry": entries[0],
            "t_live": step_times[0], "t_done": t_done, "result": result}


def w_growth(job: dict[str, Any]) -> dict[str, Any]:
    launch(job)
    DBOS.start_workflow(growth, 0).get_result()
    before = common.used_bytes(job["url"])
    step_times.clear()
    t0 = common.now()
    result = DBOS.start_workflow(growth, job["n"]).get_result()
    elapsed = common.now() - t0
    after = common.used_bytes(job["url"])
    DBOS.destroy()
    return {"bytes": after - before, "seconds": elapsed, "step_times": step_times,
            "result": result}


def w_waits_host(job: dict[str, Any]) -> dict[str, Any]:
    """Start `runs` workflows that each wait in `recv`, then stay up (DBOS keeps
    a waiting workflow executing in the process that runs it) until told to stop."""
    launch(job)
    runs = job["runs"]

    async def start() -> tuple[list[str], float, float]:
        before = await asyncio.to_thread(common.used_bytes, job["url"])
        t0 = common.now()
        ids = [(await DBOS.start_workflow_async(approval)).workflow_id for _ in range(runs)]
        t1 = common.now()
        while waiting < runs:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # each is now parked in recv
        after = await asyncio.to_thread(common.used_bytes, job["url"])
        common.emit("SETUP", {"run_ids": ids, "start_seconds": t1 - t0,
                              "suspend_seconds": common.now() - t1 - 1.0,
                              "bytes": after - before, "rss": common.rss_bytes()})
        return ids, t0, t1

    async def main() -> None:
        await start()
        common.emit("IDLE", {"pid": os.getpid()})
        await asyncio.get_running_loop().run_in_executor(None, input)  # parent: stop

    asyncio.run(main())
    DBOS.destroy()
    return {}


def w_deliver(job: dict[str, Any]) -> dict[str, Any]:
    client = DBOSClient(system_database_url=job["url"])
    sent: dict[str, float] = {}
    for i, run_id in enumerate(job["run_ids"]):
        time.sleep(job["gaps"][i])
        sent[run_id] = common.now()
        client.send(run_id, {"ok": True}, "approval")
    client.destroy()
    return {"sent": sent}


# -- the scale run (bench/scale.py) ----------------------------------------------------
# Copies of a template's rows with new ids, in every table keyed by
# workflow_uuid; the columns are read from the catalog (DBOS's schema moves).
_CLONE_TABLES = ("workflow_status", "operation_outputs", "workflow_input", "workflow_output")


def _clone(conn: Any, table: str, template: str, prefix: str, n: int,
           override: dict[str, Any]) -> None:
    from psycopg import sql

    cols = [r[0] for r in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'dbos' "
        "AND table_name = %s AND is_generated = 'NEVER' ORDER BY ordinal_position",
        (table,)).fetchall()]
    values = []
    for col in cols:
        if col == "workflow_uuid":
            values.append(sql.SQL("{} || g").format(sql.Literal(prefix)))
        elif col in override:
            values.append(sql.SQL("{}").format(sql.Literal(override[col])))
        else:
            values.append(sql.SQL("t.{}").format(sql.Identifier(col)))
    query = sql.SQL(
        "INSERT INTO dbos.{t} ({cols}) SELECT {values} "
        "FROM dbos.{t} AS t, generate_series(1, {n}) AS g WHERE t.workflow_uuid = {tpl}"
    ).format(t=sql.Identifier(table), cols=sql.SQL(", ").join(map(sql.Identifier, cols)),
             values=sql.SQL(", ").join(values), n=sql.Literal(n), tpl=sql.Literal(template))
    conn.execute(query)


def w_scale_seed(job: dict[str, Any]) -> dict[str, Any]:
    """A database with `size` workflows: copies of one finished `small` run of
    the queue, 90% as they are, 10% PENDING (waiting) out of the queue on an
    executor that is gone (no process recovers them; in the queue they would
    count against its concurrency)."""
    import psycopg

    launch(job)
    queue = DBOS.register_queue("bench")
    template = queue.enqueue(small, 0)
    template.get_result()
    DBOS.destroy()
    size = job["size"]
    finished = int(size * 0.9) - 1
    waiting = {"status": "PENDING", "queue_name": None, "executor_id": "departed",
               "output": None, "completed_at": None}
    t0 = common.now()
    with psycopg.connect(job["url"], autocommit=True) as conn:
        for prefix, n, override in (("f", finished, {}), ("w", size - finished - 1, waiting)):
            with conn.transaction():
                for table in _CLONE_TABLES:
                    _clone(conn, table, template.workflow_id, prefix, n,
                           override if table == "workflow_status" else {})
        conn.execute("VACUUM ANALYZE")
        row = conn.execute("SELECT count(*) FROM dbos.workflow_status").fetchone()
    return {"seconds": common.now() - t0, "workflows": row[0] if row else 0}


def w_scale_worker(job: dict[str, Any]) -> dict[str, Any]:
    """A process serving the queue until the parent says stop."""
    launch(job)
    DBOS.register_queue("bench", concurrency=job["concurrency"],
                        worker_concurrency=job["per_process"], polling_interval_sec=0.01)
    common.emit("READY", {"pid": os.getpid()})
    input()
    DBOS.destroy()
    return {}


def w_scale_enqueue(job: dict[str, Any]) -> dict[str, Any]:
    client = DBOSClient(system_database_url=job["url"])
    options: Any = {"queue_name": "bench", "workflow_name": "small"}
    t0 = common.now()
    handles = [client.enqueue(options, i) for i in range(job["runs"])]
    t1 = common.now()
    done = sum(1 for h in handles if h.get_result() is not None)
    t2 = common.now()
    client.destroy()
    return {"enqueue_seconds": t1 - t0, "seconds": t2 - t0, "completed": done}


WORKLOADS = {
    "scale_seed": w_scale_seed, "scale_worker": w_scale_worker,
    "scale_enqueue": w_scale_enqueue,
    "seq": w_seq, "many": w_many, "recover_prepare": w_recover_prepare, "recover": w_recover,
    "growth": w_growth, "waits_host": w_waits_host, "deliver": w_deliver,
}


def main() -> None:
    job = common.args()
    out = WORKLOADS[job["workload"]](job)
    common.result({**out, "t_start": T_START})


if __name__ == "__main__":
    main()
