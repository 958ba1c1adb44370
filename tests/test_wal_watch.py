"""Watching a SQLite file's -wal for writes (`stead.store.sqlite.wal_watch`)."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from stead.store.sqlite import wal_watch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="inotify is Linux's")


def _wal_file(tmp_path: Path) -> tuple[sqlite3.Connection, str]:
    path = str(tmp_path / "w.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    return conn, path


async def test_a_commit_on_another_connection_is_seen_at_once(tmp_path: Path) -> None:
    conn, path = _wal_file(tmp_path)
    watch = wal_watch.open_watch(path)
    assert watch is not None
    try:
        assert not await watch.written(0.01)  # nothing written since it began
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("INSERT INTO t VALUES (1)")
        assert await watch.written(5.0)
        assert not await watch.written(0.01)  # the events were read
    finally:
        watch.close()
        conn.close()


def test_a_file_without_a_wal_gives_no_watch(tmp_path: Path) -> None:
    assert wal_watch.open_watch(str(tmp_path / "none.db")) is None
    assert wal_watch.open_watch(":memory:") is None
