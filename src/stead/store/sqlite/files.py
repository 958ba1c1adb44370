"""The files of an SQLite database in WAL mode, and noticing when they are
taken away from a process that has them open.

A database in WAL mode is three files: the database, its `-wal` (commits not
yet copied into the database) and its `-shm` (the index of the `-wal`, shared
by every process that has the database open). SQLite keeps using the files it
opened: if one is deleted or replaced under it, it goes on with the old one,
which no other process can open again.

- The database file deleted: what is written now is lost.
- The `-wal` or `-shm` deleted while a process has the database open: that
  process keeps its commits in its deleted files, and a process opening the
  database afresh makes new ones, seeing none of them. Its writes land in the
  new `-wal`, which the first process deletes (by name) when it closes last
  and copies its own commits into the database: an acknowledged write lost.

So a store records the identity of the three files when it opens them and
checks them at every claim (`Opened.check`, `DatabaseMissing`: the worker
stops, and as the last process closes it copies its commits into the
database file), and refuses to open a database whose `-wal` or `-shm` is
missing while another process holds it open (`Opened.hold`), so no write
goes where it would be lost.
"""

from __future__ import annotations

import collections
import os
import struct
import sys
import threading
import time

from stead import errors

if sys.platform != "win32":
    import fcntl

SIDECARS = ("-wal", "-shm")
# SQLite's lock bytes on the database file (os_unix.c): every connection to a
# database in WAL mode holds a read lock in the shared range while it is open.
_PENDING_BYTE = 0x40000000
_LOCKS = ((_PENDING_BYTE, 2), (_PENDING_BYTE + 2, 510))
# How long a missing -wal or -shm beside a held database is looked at again
# before the open is refused: another process may be creating them right now
# (its first open), or deleting them (its last close).
_PATIENCE = 1.0
# struct flock, field order and all, where the probe knows it.
_FLOCK = {"linux": "hhqqi", "darwin": "qqihh"}.get(sys.platform)
# The databases (by identity) this process has open. Closing any descriptor
# of a file drops every POSIX lock the process holds on it, SQLite's
# included, so the lock probe never opens a database this process holds.
_HELD_HERE: collections.Counter[tuple[int, int]] = collections.Counter()
_HELD_LOCK = threading.Lock()


def identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`, None if there is none."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


class Opened:
    """A database this process opens: the identities of its files, checked
    at every claim. Built before the first connection (`hold`), watching its
    sidecars once they exist (`watch`), and `release`d once the connections
    are closed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.database: tuple[int, int] | None = None
        self.sidecars: dict[str, tuple[int, int] | None] = {}

    def hold(self) -> None:
        """Refuse (`DatabaseMissing`) a database whose `-wal` or `-shm` is
        missing while another process holds it open: they were deleted
        under that process, and what this one wrote could be lost when it
        closes (see the module docstring). Otherwise note that this process
        holds it, before any connection takes a lock, so that no probe here
        drops those locks."""
        with _HELD_LOCK:
            _refuse_orphaned(self.path)
            self.database = identity(self.path)
            if self.database is not None:
                _HELD_HERE[self.database] += 1

    def watch(self) -> None:
        """Note the sidecars' identities (a connection has made them); one
        that is not there (None) is not watched."""
        self.sidecars = {suffix: identity(self.path + suffix) for suffix in SIDECARS}

    def release(self) -> None:
        """The store closed its connections to the database."""
        with _HELD_LOCK:
            if self.database is not None:
                _HELD_HERE[self.database] -= 1
                if _HELD_HERE[self.database] <= 0:
                    del _HELD_HERE[self.database]
        self.database = None
        self.sidecars = {}

    def check(self) -> None:
        """Raise `DatabaseMissing` if a file at the path is no longer the one
        opened (deleted, or replaced)."""
        if self.database is None:
            return
        try:
            now = identity(self.path)
            sidecars = {suffix: identity(self.path + suffix) for suffix in SIDECARS}
        except OSError:  # cannot look (permissions): no news is good news
            return
        if now != self.database:
            what = "was deleted" if now is None else "was replaced by another file"
            raise errors.DatabaseMissing(
                f"database {self.path} {what} while this process had it open; what it "
                "writes now would be lost. Stop every worker on it, restore the file "
                "from a backup (or start afresh), then start the workers again"
            )
        for suffix, opened in self.sidecars.items():
            if opened is not None and sidecars[suffix] != opened:
                what = "was deleted" if sidecars[suffix] is None else "was replaced"
                raise errors.DatabaseMissing(
                    f"database {self.path}: its {suffix} file {what} while this process "
                    "had it open, so no process opening it now sees what this one "
                    "committed; this worker stops, and the last process to close the "
                    "database copies its commits into the file. Stop every process using "
                    "it, then start the workers again"
                )


def _refuse_orphaned(path: str) -> None:
    """See `Opened.hold` (called under `_HELD_LOCK`)."""
    deadline = time.monotonic() + _PATIENCE
    while True:
        missing = [s for s in SIDECARS if not os.path.exists(path + s)]
        if not missing or not os.path.exists(path) or not _held_by_another(path):
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    raise errors.DatabaseMissing(
        f"database {path}: its {' and '.join(missing)} file is missing while another "
        "process has the database open (deleted under it), so what is written now could "
        "be lost; nothing was written. Stop every process using it (the last to close "
        "copies its commits into the file), then try again"
    )


def _held_by_another(path: str) -> bool:
    """Whether another process holds an SQLite lock on the database file
    (POSIX locks: this process's own are not reported). Not asked where
    this process has the database open itself, nor where the lock record's
    layout is not known here."""
    if identity(path) in _HELD_HERE or _FLOCK is None or sys.platform == "win32":
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return any(_conflicts(fd, _FLOCK, start, length) for start, length in _LOCKS)
    except OSError:
        return False
    finally:
        os.close(fd)


def _conflicts(fd: int, layout: str, start: int, length: int) -> bool:
    """Whether another process holds a lock that a write lock on `length`
    bytes from `start` would conflict with (F_GETLK)."""
    if layout.startswith("h"):  # Linux: type, whence, start, length, pid
        probe = struct.pack(layout, fcntl.F_WRLCK, os.SEEK_SET, start, length, 0)
        kind = struct.unpack(layout, fcntl.fcntl(fd, fcntl.F_GETLK, probe))[0]
    else:  # macOS: start, length, pid, type, whence
        probe = struct.pack(layout, start, length, 0, fcntl.F_WRLCK, os.SEEK_SET)
        kind = struct.unpack(layout, fcntl.fcntl(fd, fcntl.F_GETLK, probe))[3]
    return bool(kind != fcntl.F_UNLCK)
