"""The SQLite store's plumbing: the connection on its own thread, one
transaction per write, migrations, and the mapping of rows to records.
`sqlite.py` (runs, leases, journal) and `sqlite_waits.py` (waits, events, task
state) build on it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlparse

from stead import errors
from stead.clock import Clock
from stead.records import (
    EventRow,
    Fence,
    Record,
    ResumeRecord,
    RunRow,
    StateRow,
    WaitRow,
)
from stead.store import sql_files, sqlite_group
from stead.store.base import Store

T = TypeVar("T")
_Q = sql_files.queries("sqlite")

# A run counts as writing alongside others for this long after its last append.
_ALONE_WINDOW = 0.25
# How often an idle worker looks whether anyone committed to the file.
_WATCH_INTERVAL = 0.01


class _Busy:
    """The connection (or the file's write lock) is taken right now."""


BUSY = _Busy()
_TERMINAL_SQL = ("completed", "failed", "cancelled")


def path_from_url(url: str) -> str:
    """`sqlite:///rel.db` is relative, `sqlite:////abs.db` absolute,
    `sqlite://:memory:` is private to one connection (tests only)."""
    parsed = urlparse(url)
    if parsed.scheme != "sqlite":
        raise errors.StoreError(f"not a sqlite URL: {url!r}")
    if parsed.netloc == ":memory:":
        return ":memory:"
    path = unquote(parsed.path)
    if path.startswith("/"):
        path = path[1:]
    if not path:
        raise errors.StoreError(f"sqlite URL {url!r} names no file: use sqlite:///stead.db")
    return path


def _translate(exc: sqlite3.Error, path: str) -> errors.StoreError:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return errors.StoreUnavailable(
            f"database {path} is locked by another process and stayed locked past the "
            f"busy timeout ({text}); nothing was written, try again"
        )
    if isinstance(exc, sqlite3.DatabaseError) and (
        "not a database" in text or "malformed" in text or "unable to open" in text
        or "readonly" in text or "disk I/O" in text
    ):
        return errors.StoreUnavailable(
            f"database {path} cannot be used ({text}); check the path and its permissions"
        )
    return errors.StoreError(f"database {path}: {text}")


def _run_row(row: sqlite3.Row) -> RunRow:
    return RunRow(
        run_id=row["run_id"], workflow=row["workflow"], version=row["version"],
        task_id=row["task_id"], status=row["status"], input=row["input"],
        result=row["result"], error=row["error"], epoch=row["epoch"],
        lease_owner=row["lease_owner"], lease_expires_at=row["lease_expires_at"],
        created_at=row["created_at"], updated_at=row["updated_at"], wake_at=row["wake_at"],
    )


def _wait_row(row: sqlite3.Row) -> WaitRow:
    return WaitRow(**{f: row[f] for f in WaitRow.__dataclass_fields__})


def _event_row(row: sqlite3.Row) -> EventRow:
    return EventRow(**{f: row[f] for f in EventRow.__dataclass_fields__})


def _state_row(row: sqlite3.Row) -> StateRow:
    return StateRow(task_key=row["task_key"], version=row["version"], data=row["data"],
                    run_id=row["run_id"], updated_at=row["updated_at"])


def _record(row: sqlite3.Row) -> Record:
    return Record(
        seq=row["seq"], addr=row["addr"], attempt=row["attempt"], kind=row["kind"],
        name=row["name"], digest=row["digest"], status=row["status"],
        payload=row["payload"], epoch=row["epoch"], at=row["at"],
    )


def _record_params(run_id: str, r: Record) -> dict[str, Any]:
    return {
        "run_id": run_id, "seq": r.seq, "addr": r.addr, "attempt": r.attempt,
        "kind": r.kind, "name": r.name, "digest": r.digest, "status": r.status,
        "payload": r.payload, "epoch": r.epoch, "at": r.at,
    }


def _resume_params(r: ResumeRecord) -> dict[str, Any]:
    return {
        "run_id": r.run_id, "epoch": r.epoch, "worker_id": r.worker_id, "at": r.at,
        "from_seq": r.from_seq, "code_version": r.code_version, "reused": r.reused,
        "detail": r.detail,
    }


def busy_timeout_from_url(url: str, default: float) -> float:
    """`sqlite:///x.db?busy_timeout=0.5`: seconds to wait for a lock held by
    another connection before giving up with `StoreUnavailable`."""
    options = parse_qs(urlparse(url).query, keep_blank_values=True)
    unknown = sorted(set(options) - {"busy_timeout"})
    if unknown:
        raise errors.StoreError(
            f"sqlite URL {url!r}: unknown option(s) {', '.join(unknown)}; "
            "the one option is busy_timeout=SECONDS"
        )
    if "busy_timeout" not in options:
        return default
    text = options["busy_timeout"][-1]
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also refuses nan
        raise errors.StoreError(
            f"sqlite URL {url!r}: busy_timeout must be a number of seconds >= 0, got {text!r}"
        )
    return seconds


class SQLiteBase(Store):
    def __init__(self, url: str, *, clock: Clock, busy_timeout: float = 10.0) -> None:
        self.url = url
        self.clock = clock
        self.path = path_from_url(url)
        self.busy_timeout = busy_timeout_from_url(url, busy_timeout)
        self._conn: sqlite3.Connection | None = None
        # A second connection that never waits for the file's write lock: the
        # event loop commits on it itself when nothing else is writing (below).
        self._inline_conn: sqlite3.Connection | None = None
        # Only ever asked PRAGMA data_version, by idle workers (`wait_for_work`).
        self._watch_conn: sqlite3.Connection | None = None
        # The store thread and the event loop take turns with the connections.
        self._conn_lock = threading.Lock()
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stead-sqlite")
        self._commits = 0
        self._appends = sqlite_group.GroupCommit(self)
        self._writers: dict[str, float] = {}  # run id -> when it last appended

    # -- plumbing -----------------------------------------------------------
    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` with the connection: on the event loop itself while no run
        is writing (see `_alone`), else on the store thread."""
        return await self._call_for(None, fn)

    async def _call_for(self, run_id: str | None, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`_call` for a write of run `run_id`'s execution (None: of no run)."""
        if self._alone(run_id):
            done = self._try_inline(fn)
            if not isinstance(done, _Busy):
                return done
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._guarded, fn)

    def _alone(self, run_id: str | None) -> bool:
        """Whether no run but `run_id` has written to this store lately.
        Alone, handing a statement to the store thread buys nothing but two
        thread wake-ups (measured: ~0.3 ms a commit on a 2-core VM); with
        runs writing side by side, the thread lets their appends share commits
        and their Python work overlap the disk."""
        now = time.monotonic()
        writers = self._writers
        if run_id is not None:
            writers[run_id] = now
        if len(writers) > 1 or (writers and run_id is None):
            horizon = now - _ALONE_WINDOW
            for other in [k for k, at in writers.items() if at < horizon]:
                del writers[other]
        return not writers or (run_id is not None and len(writers) == 1)

    def _done_writing(self, run_id: str) -> None:
        self._writers.pop(run_id, None)

    def _try_inline(self, fn: Callable[[sqlite3.Connection], T]) -> T | _Busy:
        """Run `fn` on the calling thread (the event loop) on the inline
        connection, unless the store thread is using the connections or
        another process holds the write lock: then `BUSY`, nothing done. The
        inline connection never waits for a lock, so the loop blocks for one
        local commit at most, never for another process."""
        conn = self._inline_conn
        if conn is None or not self._conn_lock.acquire(blocking=False):
            return BUSY
        try:
            return fn(conn)
        except sqlite3.OperationalError as exc:
            if _is_locked(exc):
                return BUSY
            raise _translate(exc, self.path) from exc
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc
        finally:
            self._conn_lock.release()

    def _translate(self, exc: sqlite3.Error) -> errors.StoreError:
        return _translate(exc, self.path)

    def _guarded(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._conn_lock:
            if self._conn is None:
                raise errors.StoreError("store is closed")
            try:
                return fn(self._conn)
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc

    @contextmanager
    def _write(self, conn: sqlite3.Connection) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._commits += 1

    @property
    def commits(self) -> int:
        return self._commits

    def _connect(self) -> None:
        if self.path != ":memory:":
            parent = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(parent):
                raise errors.StoreUnavailable(
                    f"cannot create database {self.path}: folder {parent} does not exist"
                )
        try:
            conn = self._open_connection(self.busy_timeout)
            _set_wal(conn, self.busy_timeout)
            self._conn = conn
            self._migrate(conn)
            if self.path != ":memory:":  # a second :memory: connection is another database
                self._inline_conn = self._open_connection(0.0)
                self._watch_conn = self._open_connection(0.0)
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc

    def _open_connection(self, timeout: float) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=timeout, isolation_level=None, check_same_thread=False,
        )
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        with self._write(conn):
            conn.execute(
                "CREATE TABLE IF NOT EXISTS stead_schema (version INTEGER PRIMARY KEY)"
            )
            row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM stead_schema").fetchone()
            current = int(row[0])
            for version, script in sql_files.migrations("sqlite"):
                if version <= current:
                    continue
                for statement in _statements(script):
                    conn.execute(statement)
                conn.execute("INSERT INTO stead_schema (version) VALUES (?)", (version,))

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._connect)

    async def close(self) -> None:
        def _close() -> None:
            with self._conn_lock:
                for conn in (self._conn, self._inline_conn, self._watch_conn):
                    if conn is not None:
                        conn.close()
                self._conn = self._inline_conn = self._watch_conn = None

        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, _close)
        self._thread.shutdown(wait=False)

    async def wait_for_work(self, timeout: float) -> None:
        """Return soon after anyone (another process, this one) commits to the
        file, or after `timeout`. SQLite cannot notify, but `PRAGMA
        data_version` changes with every commit made on another connection and
        reading it touches no disk: a look every 10 ms costs microseconds, and
        the worker's claim query runs only when something changed (or at the
        poll, for timers that came due)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen = self._data_version()
        if seen is None:
            await asyncio.sleep(timeout)
            return
        while (left := deadline - loop.time()) > 0:
            await asyncio.sleep(min(_WATCH_INTERVAL, left))
            if self._data_version() != seen:
                return

    def _data_version(self) -> int | None:
        conn = self._watch_conn
        if conn is None:
            return None
        try:
            return int(conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:  # cannot look: the poll's timeout still wakes the worker
            return None

    def _check_fence(self, conn: sqlite3.Connection, fence: Fence) -> None:
        if conn.execute(_Q["fence"], _fence(fence)).fetchone() is None:
            raise _stale(fence)

    def _fenced_insert(
        self, conn: sqlite3.Connection, fence: Fence, records: Sequence[Record],
        resume: ResumeRecord | None,
    ) -> None:
        """`_check_fence` then `_insert`, in a write transaction; the fence is
        checked by the first record's INSERT itself (a journal append is then
        three statements: BEGIN, INSERT, COMMIT)."""
        if not records:
            self._check_fence(conn, fence)
            self._insert(conn, fence, records, resume)
            return
        first = _record_params(fence.run_id, records[0])
        first["fence_epoch"], first["worker_id"] = fence.epoch, fence.worker_id
        if conn.execute(_Q["insert_record_fenced"], first).rowcount == 0:
            raise _stale(fence)
        self._insert(conn, fence, records[1:], resume)

    def _insert(
        self, conn: sqlite3.Connection, fence: Fence, records: Sequence[Record],
        resume: ResumeRecord | None,
    ) -> None:
        if len(records) == 1:
            conn.execute(_Q["insert_record"], _record_params(fence.run_id, records[0]))
        elif records:
            conn.executemany(
                _Q["insert_record"], [_record_params(fence.run_id, r) for r in records]
            )
        if resume is not None:
            conn.execute(_Q["insert_resume"], _resume_params(resume))

    def _wait_state(self, conn: sqlite3.Connection, wait_id: str) -> str:
        row = conn.execute(_Q["get_wait"], {"wait_id": wait_id}).fetchone()
        return "missing" if row is None else str(row["state"])


def _stale(fence: Fence) -> errors.StaleLease:
    return errors.StaleLease(
        f"worker {fence.worker_id} no longer holds run {fence.run_id} at epoch "
        f"{fence.epoch}: it was taken over or cancelled; the write was rejected"
    )


def _fence(fence: Fence) -> dict[str, Any]:
    return {"run_id": fence.run_id, "epoch": fence.epoch, "worker_id": fence.worker_id}


def _statements(script: str) -> Iterator[str]:
    """Split a migration into statements (sqlite3 runs one per execute)."""
    buf: list[str] = []
    for line in script.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buf.append(line)
        text = "\n".join(buf)
        if sqlite3.complete_statement(text):
            yield text
            buf = []
    if "\n".join(buf).strip():
        raise errors.StoreError("migration ends with an incomplete statement")


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def _set_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch to WAL. While another process is switching the same new file,
    SQLite answers "locked" at once instead of waiting out the busy timeout,
    so wait here (up to that timeout) for it to finish."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
