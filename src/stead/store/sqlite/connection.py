"""Connecting to an SQLite file: the URL, the connections (and the thread
that uses them), WAL, and the one place where sqlite3's errors become
stead's. Migrations are `migrate`'s."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar
from urllib.parse import parse_qs, unquote, urlparse

from stead import errors
from stead.store import seam
from stead.store.sqlite import files

T = TypeVar("T")


def path_from_url(url: str) -> str:
    """`sqlite:///rel.db` is relative, `sqlite:////abs.db` absolute,
    `sqlite://:memory:` is private to one connection (tests only)."""
    parsed = urlparse(url)
    if parsed.scheme != "sqlite":
        raise errors.StoreError(f"not a sqlite URL: {url!r}")
    if parsed.netloc == ":memory:":
        return ":memory:"
    if parsed.netloc:
        raise errors.StoreError(
            f"sqlite URL {url!r} names a host ({parsed.netloc!r}); a SQLite database is a "
            f"local file: sqlite:///{parsed.netloc}{parsed.path} (relative) or "
            f"sqlite:////abs/path.db (absolute)"
        )
    path = unquote(parsed.path)
    if path.startswith("/"):
        path = path[1:]
    if not path:
        raise errors.StoreError(f"sqlite URL {url!r} names no file: use sqlite:///stead.db")
    return path


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


def translate(exc: sqlite3.Error, path: str) -> errors.StoreError:
    text = str(exc)
    if isinstance(exc, sqlite3.IntegrityError | sqlite3.DataError):
        # A broken constraint, a value too big: the same write fails again.
        return errors.StoreRejected(
            f"database {path} refused it for good ({text}); trying again cannot succeed, "
            "nothing was written")
    if is_locked(exc):
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
    if isinstance(exc, sqlite3.DatabaseError) and "is full" in text:
        return errors.StoreUnavailable(
            f"database {path}: the disk is full ({text}); nothing was written. Free "
            "some space: what was running is taken over then"
        )
    return errors.StoreError(f"database {path}: {text}")


def is_locked(exc: sqlite3.Error) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def check_folder(path: str) -> None:
    if path != ":memory:":
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise errors.StoreUnavailable(
                f"cannot create database {path}: folder {parent} does not exist"
            )


def create_private(path: str) -> None:
    """Create the database file readable by its owner only (0600), if it does
    not exist yet: SQLite gives its -wal and -shm files the mode of the
    database file. An existing file keeps the mode its owner gave it."""
    if path == ":memory:":
        return
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    except OSError as exc:
        raise errors.StoreUnavailable(
            f"cannot create database {path} ({exc}); check the folder's permissions"
        ) from exc


def connect(path: str, timeout: float) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), with
    durable commits and rows readable by column name."""
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def set_wal(conn: sqlite3.Connection, timeout: float) -> None:
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


class _Busy:
    """The connections (or the file's write lock) are taken right now."""


@dataclasses.dataclass(frozen=True, slots=True)
class Mark(seam.WorkMark):
    """The file's data version as the watch connection saw it, and how many
    transactions this connector had begun by then (none of them in flight)."""

    version: int
    begun: int


BUSY = _Busy()
# A run counts as writing alongside others for this long after its last write.
_ALONE_WINDOW = 0.25


class Connector:
    """The file's three connections and the store's thread.

    - The writer connection is used on the store's own thread (one per store
      object), so the event loop never waits on disk or on another process's
      lock; writes queued there share commits (see `group`).
    - The inline connection never waits for the file's lock: the event loop
      commits on it itself while one run writes alone (see `alone`).
    - The watch connection is only asked `PRAGMA data_version`, by idle workers.
    """

    def __init__(self, path: str, busy_timeout: float, *, existing: bool = False) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.existing = existing  # open the file only if it is there (see `_connect`)
        self.commits = 0
        # Transactions begun and ended on the writer and inline connections
        # (each under `_lock`): while they are equal none is in flight, and a
        # change of the data version since a `mark` is another connection's.
        self._begun = 0
        self._ended = 0
        self._conn: sqlite3.Connection | None = None
        self._inline: sqlite3.Connection | None = None
        self._watch: sqlite3.Connection | None = None
        # The store thread and the event loop take turns with the connections.
        self._lock = threading.Lock()
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stead-sqlite")
        self._writers: dict[str, float] = {}  # run id -> when it last wrote
        self._files = files.Opened(path)  # what was opened, checked at every claim

    # -- lifetime -----------------------------------------------------------
    async def open(self, migrate: Callable[[sqlite3.Connection], bool]) -> None:
        """Connect, and bring the schema up to date with `migrate` (which says
        whether it committed anything)."""
        await asyncio.get_running_loop().run_in_executor(self._thread, self._connect, migrate)

    def _connect(self, migrate: Callable[[sqlite3.Connection], bool]) -> None:
        check_folder(self.path)
        try:
            if self.existing and self.path != ":memory:" and not os.path.exists(self.path):
                # A second connection of a process whose database was deleted
                # must not make an empty one in its place, where the first
                # would see "replaced" and others would start afresh.
                raise errors.DatabaseMissing(
                    f"database {self.path} was deleted while this process had it open; "
                    "stop every worker on it, restore the file from a backup (or start "
                    "afresh), then start the workers again"
                )
            create_private(self.path)
            if self.path != ":memory:":
                self._files.hold()
            conn = connect(self.path, self.busy_timeout)
            set_wal(conn, self.busy_timeout)
            self._conn = conn
            if migrate(conn):
                self.commits += 1
            if self.path != ":memory:":  # a second :memory: connection is another database
                self._inline = connect(self.path, 0.0)
                self._watch = connect(self.path, 0.0)
                self._files.watch()
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc

    def check_file(self) -> None:
        """Raise `DatabaseMissing` if the file at the path, or its -wal or
        -shm, is no longer the one opened (deleted, or replaced): SQLite would
        go on with the old one, which no one can open again (see `files`)."""
        self._files.check()

    async def close(self) -> None:
        def close_all() -> None:
            with self._lock:
                for conn in (self._conn, self._inline, self._watch):
                    if conn is not None:
                        conn.close()
                self._conn = self._inline = self._watch = None
                self._files.release()

        await asyncio.get_running_loop().run_in_executor(self._thread, close_all)
        self._thread.shutdown(wait=False)

    # -- running statements ---------------------------------------------------
    async def call(self, fn: Callable[[sqlite3.Connection], T], run_id: str | None = None,
                   *, inline: bool = True) -> T:
        """Run `fn` with a connection: on the event loop itself while no run
        but `run_id` (None: a call of no run) is writing, else (or when not
        `inline`: `fn` reads files) on the thread."""
        if inline and self.alone(run_id):
            done = self.try_inline(fn)
            if not isinstance(done, _Busy):
                return done
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self.on_writer, fn)

    def submit(self, fn: Callable[[], object]) -> None:
        """Start `fn` on the store's thread (it uses `on_writer` there)."""
        asyncio.get_running_loop().run_in_executor(self._thread, fn)

    def on_writer(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` with the writer connection (on the store's thread)."""
        with self._lock:
            if self._conn is None:
                raise errors.StoreError("store is closed")
            try:
                return fn(self._conn)
            except sqlite3.Error as exc:
                raise translate(exc, self.path) from exc

    def try_inline(self, fn: Callable[[sqlite3.Connection], T]) -> T | _Busy:
        """Run `fn` on the calling thread (the event loop) on the inline
        connection, unless the store thread is using the connections or
        another process holds the write lock: then `BUSY`, nothing done. The
        inline connection never waits for a lock, so the loop blocks for one
        local commit at most, never for another process."""
        conn = self._inline
        if conn is None or not self._lock.acquire(blocking=False):
            return BUSY
        try:
            return fn(conn)
        except sqlite3.OperationalError as exc:
            if is_locked(exc):
                seam.retried("locked")  # done again on the store's thread, waiting
                return BUSY
            raise translate(exc, self.path) from exc
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc
        finally:
            self._lock.release()

    @contextlib.contextmanager
    def transaction(self, conn: sqlite3.Connection, *, synced: bool = True) -> Iterator[None]:
        """A write transaction: `BEGIN IMMEDIATE` takes the file's write lock
        at once, so what it reads stays true until its commit.

        Not `synced` (a claim's): the commit is written to the `-wal` but not
        synced (`synchronous=NORMAL` for it alone). It is as final as any
        other for every process, and survives any of them being killed; only
        a power cut or a crash of the machine can lose it, and with it every
        commit after it until the next synced one, whose sync makes the `-wal`
        durable up to it. Such a crash ends every process on the file too (the
        `-wal` is shared through memory, so they share the machine): no
        worker survives that believes it holds the lost lease, and whatever a
        claimed run makes known outside (a step's record, an effect's intent,
        its end) commits synced after the claim. So a wake-up waits for the
        disk once (the delivery's sync), not twice."""
        self._begun += 1
        try:
            if not synced:
                conn.execute("PRAGMA synchronous=NORMAL")
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            finally:
                if not synced:
                    conn.execute("PRAGMA synchronous=FULL")
        finally:
            self._ended += 1
        self.commits += 1

    def translate(self, exc: sqlite3.Error) -> errors.StoreError:
        return translate(exc, self.path)

    # -- who is writing ---------------------------------------------------------
    def alone(self, run_id: str | None) -> bool:
        """Whether no run but `run_id` has written lately (noting that it
        writes now). Alone, handing a statement to the store thread buys
        nothing but two thread wake-ups (measured: ~0.3 ms a commit on a
        2-core VM); with runs writing side by side, the thread lets their
        appends share commits and their Python work overlap the disk."""
        now = time.monotonic()
        writers = self._writers
        if run_id is not None:
            writers[run_id] = now
        if len(writers) > 1 or (writers and run_id is None):
            horizon = now - _ALONE_WINDOW
            for other in [k for k, at in writers.items() if at < horizon]:
                del writers[other]
        return not writers or (run_id is not None and len(writers) == 1)

    def writing(self, run_ids: Iterable[str]) -> None:
        """Runs this process just leased: they are about to write, so count
        them as writing (each stays counted for `_ALONE_WINDOW` after its
        last write, or until `done_writing`). One run alone still commits
        inline."""
        now = time.monotonic()
        for run_id in run_ids:
            self._writers[run_id] = now

    def done_writing(self, run_id: str) -> None:
        """Run `run_id` gave its lease up: it writes no more."""
        self._writers.pop(run_id, None)

    def mark(self) -> Mark | None:
        """The data version now, with this connector's count of transactions
        begun; None while one of them is in flight (its commit would show as
        another connection's) or where the version cannot be read."""
        begun = self._begun
        if self._ended != begun:
            return None
        version = self.data_version()
        if version is None or self._begun != begun:  # one began while it was read
            return None
        return Mark(version, begun)

    def seen_at(self, mark: Mark) -> int | None:
        """`mark`'s data version if this connector has begun no transaction
        since: any change of the version from it is then another
        connection's commit. None if it has (its own commit would look like
        news)."""
        # None was in flight at the mark, so none began since if the count is the same.
        return mark.version if self._begun == mark.begun else None

    def data_version(self) -> int | None:
        """Changes with every commit made to the file on another connection;
        reading it touches no disk. None if it cannot be read."""
        conn = self._watch
        if conn is None:
            return None
        try:
            return int(conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            return None
