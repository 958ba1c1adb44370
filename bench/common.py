"""Helpers shared by the workload scripts (`w_*.py`). Standard library only:
these run in the peers' virtual environment too."""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from typing import Any

now = time.perf_counter  # CLOCK_MONOTONIC on Linux: comparable across processes

MESSAGE_BYTES = 1024


def args() -> dict[str, Any]:
    """The job a workload script was given (one JSON argument)."""
    job: dict[str, Any] = json.loads(sys.argv[1])
    return job


def emit(tag: str, payload: Any) -> None:
    """One line the parent reads: `TAG {json}`."""
    sys.stdout.write(f"{tag} {json.dumps(payload)}\n")
    sys.stdout.flush()


def result(payload: dict[str, Any]) -> None:
    emit("RESULT", payload)


def message(i: int) -> str:
    """A 1 KB chat message (ASCII, so 1 KB of text is 1 KB of UTF-8)."""
    head = f"message {i}: "
    body = "lorem ipsum dolor sit amet " * 40
    return (head + body)[:MESSAGE_BYTES]


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of a process, from /proc."""
    with open(f"/proc/{pid or os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def context_switches() -> dict[int, tuple[int, int]]:
    """Voluntary and involuntary context switches so far, by thread id, of
    every thread of this process (Linux /proc; empty elsewhere)."""
    found: dict[int, tuple[int, int]] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return found
    for tid in tids:
        counts = {}
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
                        counts[key] = int(value)
        except OSError:
            continue  # the thread ended meanwhile
        found[int(tid)] = (counts.get("voluntary_ctxt_switches", 0),
                           counts.get("nonvoluntary_ctxt_switches", 0))
    return found


def sqlite_path(url: str) -> str:
    """`sqlite:////abs/path.db` -> `/abs/path.db`."""
    assert url.startswith("sqlite:///"), url
    return url[len("sqlite:///"):]


def sqlite_used_bytes(path: str) -> int:
    """Bytes in use in a SQLite database as its latest commit sees it (WAL
    included): (page_count - freelist_count) * page_size."""
    conn = sqlite3.connect(path)
    try:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)
    finally:
        conn.close()


def pg_database_bytes(url: str) -> int:
    import psycopg  # present in both venvs

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        assert row is not None
        return int(row[0])


def used_bytes(url: str) -> int:
    return sqlite_used_bytes(sqlite_path(url)) if url.startswith("sqlite") \
        else pg_database_bytes(url)


class SqliteTrace:
    """Counts the statements and COMMITs every sqlite3 connection opened after
    `install()` executes (implicit BEGIN/COMMIT of the sqlite3 module included)."""

    def __init__(self) -> None:
        self.statements = 0
        self.commits = 0

    def _seen(self, sql: str) -> None:
        self.statements += 1
        head = sql.lstrip()[:6].upper()
        if head.startswith(("COMMIT", "END")):
            self.commits += 1

    def install(self) -> None:
        original: Callable[..., sqlite3.Connection] = sqlite3.connect

        def connect(*a: Any, **k: Any) -> sqlite3.Connection:
            conn = original(*a, **k)
            conn.set_trace_callback(self._seen)
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]
        sqlite3.dbapi2.connect = connect  # type: ignore[attr-defined]

    def snapshot(self) -> tuple[int, int]:
        return self.statements, self.commits


def intervals_ms(times: list[float]) -> list[float]:
    return [(b - a) * 1000 for a, b in itertools.pairwise(times)]


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")
