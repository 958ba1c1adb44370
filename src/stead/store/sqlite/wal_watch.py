"""Being told, not polling, when another process writes to the file.

Every commit in WAL mode writes to the file's `-wal`; on Linux, inotify
says so the moment it happens, on a descriptor the event loop watches. An
idle worker waits on it (still looking at `PRAGMA data_version` every so
often, and deciding by it: the descriptor only says "look now"), so a
delivery from another process wakes it within the commit instead of within
the next look. Where inotify is missing (not Linux, a loop that cannot watch
descriptors) `open_watch` gives None and the worker polls as before.

A commit's frames reach the `-wal` before its sync, and it shows to other
connections only after: on a machine whose disk is busy with others'
syncs, the sync outlasts the close look that follows a write (`until`),
and the commit would be noticed at the next poll. And the first commit
after a checkpoint starts the `-wal` afresh as it writes its frames, which
other connections see as a change of the data version before the commit
itself shows: a worker woken by that claims too soon, and its next wait
hears nothing more of the commit. So a commit that may make a run claimable
(a delivery, a start: the writes that send NOTIFY on PostgreSQL) then
touches the `-wal`'s times (`poke`): an attribute change, which SQLite
neither makes nor reads there, that the watch hears once the commit shows.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator

_IN_MODIFY = 0x2
_IN_ATTRIB = 0x4
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC


# How often `until` looks while a commit it saw begin is finishing.
_TICK = 0.0001


class WalWatch:
    """An inotify descriptor watching one `-wal` file for writes."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._ticks: concurrent.futures.ThreadPoolExecutor | None = None
        self._reader: object | None = None  # the wait reading the descriptor

    async def until(self, shows: Callable[[], bool], within: float,
                    ring: Callable[[], None] | None = None) -> bool:
        """After a write: look whether the commit `shows` every `_TICK`
        seconds, for at most `within`; whether it did. A commit writes its
        frames to the -wal, syncs them, and only then shows; the event loop's
        timers wake no sooner than a millisecond after they are asked to
        (epoll counts milliseconds), about twice the sync, so the pauses
        between looks are slept in a thread of the watch's own. `shows` runs
        on the loop. With `ring`: the writes heard meanwhile (a `poke` says
        the commit shows) are looked at as they come, and `ring` is called
        if it does, before this wait's task resumes."""
        loop = asyncio.get_running_loop()
        if self._ticks is None:
            self._ticks = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="stead-wal-watch")

        def readable() -> None:
            self._drain()
            if ring is not None and shows():
                ring()

        deadline = time.monotonic() + within
        with self._reading(loop, readable) if ring is not None else contextlib.nullcontext():
            while time.monotonic() < deadline:
                await loop.run_in_executor(self._ticks, time.sleep, _TICK)
                if shows():
                    return True
        return False

    async def written(self, timeout: float, ring: Callable[[], None] | None = None,
                      shows: Callable[[], bool] | None = None) -> bool:
        """Wait until the file is written to, or `timeout`; whether it was.
        `ring` is called as the write is heard if the commit `shows` then,
        before this wait's task resumes (see `stead.waiting.Bell`)."""
        loop = asyncio.get_running_loop()
        if self._drain():
            return True
        seen = loop.create_future()

        def readable() -> None:
            if not seen.done():
                seen.set_result(None)
                if ring is not None and shows is not None and shows():
                    ring()

        with self._reading(loop, readable) as reading:
            if not reading:  # a loop that cannot watch descriptors
                await asyncio.sleep(timeout)
                return False
            try:
                # Awaited directly under a timeout: `asyncio.wait_for` would wrap
                # it in a task of its own on Python 3.11, a turn of the loop more.
                async with asyncio.timeout(timeout):
                    await seen
            except TimeoutError:
                return False
        self._drain()
        return True

    @contextlib.contextmanager
    def _reading(self, loop: asyncio.AbstractEventLoop,
                 readable: Callable[[], None]) -> Iterator[bool]:
        """`readable` called while the block runs, each time the descriptor
        has events; whether it can be (not on a loop that cannot watch
        descriptors). The descriptor has one reader: a wait begun since (a
        worker's next idle spell, while this one, cancelled, has yet to end)
        owns it from then on, and keeps it when this block ends."""
        try:
            loop.add_reader(self._fd, readable)
        except (NotImplementedError, ValueError, OSError):
            yield False
            return
        mine = self._reader = object()
        try:
            yield True
        finally:
            if self._reader is mine:
                self._reader = None
                loop.remove_reader(self._fd)

    def _drain(self) -> bool:
        """Read the events queued so far; whether there were any."""
        got = False
        while True:
            try:
                chunk = os.read(self._fd, 4096)
            except (BlockingIOError, OSError):
                return got
            if not chunk:
                return got
            got = True

    def close(self) -> None:
        if self._ticks is not None:
            self._ticks.shutdown(wait=False)
            self._ticks = None
        with contextlib.suppress(OSError):
            os.close(self._fd)


def open_watch(db_path: str) -> WalWatch | None:
    """A watch on `db_path`'s `-wal`, or None where it cannot be had."""
    if not sys.platform.startswith("linux") or db_path == ":memory:":
        return None
    # Imported here, by the store that waits for work (a worker's): one that
    # only reads (`stead runs ls`) never opens a watch.
    import ctypes

    try:
        # The interpreter's own symbols, libc's among them: no search for the
        # library by name (`ctypes.util.find_library` runs `ldconfig -p`, about
        # 50 ms of a worker's start-up).
        libc = ctypes.CDLL(None, use_errno=True)
        fd = int(libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    wd = int(libc.inotify_add_watch(fd, os.fsencode(db_path + "-wal"),
                                    _IN_MODIFY | _IN_ATTRIB))
    if wd < 0:  # no -wal yet, or no inotify watches left: poll
        os.close(fd)
        return None
    return WalWatch(fd)


def poke(db_path: str) -> None:
    """Tell the watches of other processes that a commit to `db_path` which
    may make a run claimable has shown (see the module's docstring): the
    `-wal`'s times set to now, nothing written, nothing synced."""
    if db_path == ":memory:" or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError):  # no -wal, or not ours to touch: they poll
        os.utime(db_path + "-wal")
