"""LangGraph's side of the workloads, run in bench/.venv-peers as
`python -m bench.w_langgraph '{"workload": ..., "url": ...}'`.

A "step" is one node execution (one super-step), checkpointed with
`durability="sync"` (the checkpoint is written before the next step starts).
SqliteSaver puts its file in WAL mode itself (synchronous stays at SQLite's
default, FULL); PostgresSaver opens its connections as `from_conn_string`
does (autocommit).
"""

from __future__ import annotations

import contextlib
import operator
import os
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypedDict

from bench import common

T_START = common.now()
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

T_IMPORTED = common.now()

HANG = os.environ.get("BENCH_HANG") == "1"
step_times: list[float] = []
entries: list[float] = []
LIMIT = 1_000_000  # recursion_limit: one node per super-step, far more than 1,000


class Counter(TypedDict):
    i: int
    n: int


def count(state: Counter) -> dict[str, int]:
    return {"i": state["i"] + 1}


def again(state: Counter) -> str:
    return "step" if state["i"] < state["n"] else END


def count_or_hang(state: Counter) -> dict[str, int]:
    if state["i"] == state["n"]:
        step_times.append(common.now())
        if HANG:
            common.emit("READY", {"at": common.now()})
            time.sleep(3600)
    return {"i": state["i"] + 1}


def again_or_done(state: Counter) -> str:
    return "step" if state["i"] <= state["n"] else END


class Chat(TypedDict):
    messages: Annotated[list[dict[str, str]], operator.add]
    n: int


def chat(state: Chat) -> dict[str, Any]:
    step_times.append(common.now())
    history = state["messages"]  # what a model call would be given
    return {"messages": [{"role": "assistant", "content": common.message(len(history))}]}


def chat_again(state: Chat) -> str:
    return "chat" if len(state["messages"]) < state["n"] else END


class Ask(TypedDict):
    answer: str


def ask(state: Ask) -> dict[str, str]:
    """LangGraph's analogue of a wait: interrupt until resumed with an answer."""
    return {"answer": str(interrupt("approve?"))}


woken: dict[str, float] = {}


def after(state: Ask, config: RunnableConfig) -> dict[str, str]:
    woken[config["configurable"]["thread_id"]] = common.now()
    return {}


def ask_graph() -> Any:
    g = StateGraph(Ask)
    g.add_node("ask", ask)
    g.add_node("after", after)
    g.add_edge(START, "ask")
    g.add_edge("ask", "after")
    g.add_edge("after", END)
    return g


def loop_graph(node: Any, route: Any, state: Any = Counter, name: str = "step") -> Any:
    g = StateGraph(state)
    g.add_node(name, node)
    g.add_edge(START, name)
    g.add_conditional_edges(name, route)
    return g


def small_graph() -> Any:
    g = StateGraph(Counter)
    for name in ("a", "b", "c"):
        g.add_node(name, count)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g


@contextlib.contextmanager
def saver(url: str, pool_size: int = 1) -> Iterator[Any]:
    if url.startswith("sqlite"):
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(common.sqlite_path(url), check_same_thread=False)
        try:
            s = SqliteSaver(conn)
            s.setup()
            yield s
        finally:
            conn.close()
        return
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    if pool_size > 1:
        from psycopg_pool import ConnectionPool

        with ConnectionPool(url, min_size=pool_size, max_size=pool_size,
                            kwargs=kwargs) as pool:
            s = PostgresSaver(pool)
            s.setup()
            yield s
        return
    import psycopg

    with psycopg.connect(url, **kwargs) as conn:
        s = PostgresSaver(conn)
        s.setup()
        yield s


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}, "recursion_limit": LIMIT}


def w_seq(job: dict[str, Any]) -> dict[str, Any]:
    trace = common.SqliteTrace()
    if job.get("count"):
        trace.install()
    with saver(job["url"]) as s:
        app = loop_graph(count, again).compile(checkpointer=s)
        s0, k0 = trace.snapshot()
        t0 = common.now()
        out = app.invoke({"i": 0, "n": job["n"]}, cfg("seq"), durability="sync")
        elapsed = common.now() - t0
        s1, k1 = trace.snapshot()
    assert out["i"] == job["n"], out
    return {"seconds": elapsed, "sqlite_statements": s1 - s0, "sqlite_commits": k1 - k0}


def w_many(job: dict[str, Any]) -> dict[str, Any]:
    """No queue or worker in LangGraph: the runs are invocations from a pool of
    `concurrency` threads sharing one checkpointer."""
    c = job["concurrency"]
    with saver(job["url"], pool_size=c) as s:
        app = small_graph().compile(checkpointer=s)

        def one(i: int) -> int:
            out = app.invoke({"i": i, "n": 3}, cfg(f"run-{i}"), durability="sync")
            return int(out["i"] == i + 3)

        t0 = common.now()
        with ThreadPoolExecutor(c) as pool:
            done = sum(pool.map(one, range(job["runs"])))
        elapsed = common.now() - t0
    return {"start_seconds": 0.0, "exec_seconds": elapsed, "seconds": elapsed,
            "completed": done}


def w_recover_prepare(job: dict[str, Any]) -> dict[str, Any]:
    with saver(job["url"]) as s:
        app = loop_graph(count_or_hang, again_or_done).compile(checkpointer=s)
        common.emit("RUN", {"run_id": "recover-1"})
        app.invoke({"i": 0, "n": job["n"]}, cfg("recover-1"), durability="sync")
    return {}


def w_recover(job: dict[str, Any]) -> dict[str, Any]:
    with saver(job["url"]) as s:
        app = loop_graph(count_or_hang, again_or_done).compile(checkpointer=s)
        t_ready = common.now()
        entries.append(common.now())
        out = app.invoke(None, cfg(job["run_id"]), durability="sync")  # resume the thread
        t_done = common.now()
    return {"t_imported": T_IMPORTED, "t_ready": t_ready, "t_entry": entries[0],
            "t_live": step_times[0], "t_done": t_done, "result": out["i"] - 1}


def w_growth(job: dict[str, Any]) -> dict[str, Any]:
    with saver(job["url"]) as s:
        app = loop_graph(chat, chat_again, Chat, "chat").compile(checkpointer=s)
        app.invoke({"messages": [], "n": 1}, cfg("warm-up"), durability="sync")
        before = common.used_bytes(job["url"])
        step_times.clear()
        t0 = common.now()
        out = app.invoke({"messages": [], "n": job["n"]}, cfg("growth"), durability="sync")
        elapsed = common.now() - t0
        after = common.used_bytes(job["url"])
    return {"bytes": after - before, "seconds": elapsed, "step_times": step_times,
            "result": len(out["messages"])}


def w_waits_setup(job: dict[str, Any]) -> dict[str, Any]:
    """Invoke `runs` threads up to their interrupt. Nothing stays running: a
    thread waits as a checkpoint until some caller resumes it."""
    with saver(job["url"]) as s:
        app = ask_graph().compile(checkpointer=s)
        before = common.used_bytes(job["url"])
        ids = [f"wait-{i}" for i in range(job["runs"])]
        t0 = common.now()
        for thread in ids:
            app.invoke({"answer": ""}, cfg(thread), durability="sync")
        elapsed = common.now() - t0
        after_bytes = common.used_bytes(job["url"])
    return {"run_ids": ids, "start_seconds": elapsed, "suspend_seconds": 0.0,
            "bytes": after_bytes - before, "rss": common.rss_bytes()}


def w_deliver(job: dict[str, Any]) -> dict[str, Any]:
    """Resume each thread with `Command(resume=...)`: the caller's own process
    runs the rest of the graph (there is no worker to hand it to)."""
    sent: dict[str, float] = {}
    with saver(job["url"]) as s:
        app = ask_graph().compile(checkpointer=s)
        for i, thread in enumerate(job["run_ids"]):
            time.sleep(job["gaps"][i])
            sent[thread] = common.now()
            app.invoke(Command(resume={"ok": True}), cfg(thread), durability="sync")
    return {"sent": sent, "woke": woken}


WORKLOADS = {
    "seq": w_seq, "many": w_many, "recover_prepare": w_recover_prepare, "recover": w_recover,
    "growth": w_growth, "waits_setup": w_waits_setup, "deliver": w_deliver,
}


def main() -> None:
    job = common.args()
    out = WORKLOADS[job["workload"]](job)
    common.result({**out, "t_start": T_START})


if __name__ == "__main__":
    main()
