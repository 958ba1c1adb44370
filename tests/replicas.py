"""A primary and a synchronous streaming standby on this machine, for the
failover tests: the primary is a `pg.PrivateServer`; the standby is made
from it with `pg_basebackup -R` (which writes its primary_conninfo), started
on a port of its own, and named in the primary's
`synchronous_standby_names`, so a commit the primary acknowledged is on the
standby too. `fail_over` stops the primary hard and promotes the standby.

Skips, saying why, where no server binaries are found, except under
CI=true, where it fails."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator

import pytest

from tests import pg

STANDBY = "stead_standby"


def _require_binaries() -> None:
    missing = pg._bin_dir() is None or not (pg._bin_dir() / "pg_basebackup").exists()  # type: ignore[operator]
    if not missing:
        return
    why = "no PostgreSQL server binaries (initdb, pg_basebackup) for a primary and a standby"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the failover tests cannot run: {why}", pytrace=False)
    pytest.skip(why)


class Replicated:
    """`primary` and `standby` (PrivateServers: `url`, `port`, `stop`...)."""

    def __init__(self) -> None:
        _require_binaries()
        self.primary = pg.PrivateServer()
        self.standby = pg.PrivateServer.__new__(pg.PrivateServer)
        try:
            self._build()
        except BaseException:
            self.destroy()
            raise

    def _build(self) -> None:
        self.primary.start()
        s, p = self.standby, self.primary
        s.bin, s.user = p.bin, p.user
        s.dir = p.dir.parent / f"{p.dir.name}-standby"
        s.dir.mkdir()
        if s.user is not None:
            shutil.chown(s.dir, s.user)
        s.data = s.dir / "data"
        s.port = pg._free_port()
        s.url = f"postgresql://postgres@127.0.0.1:{s.port}/postgres"
        s._run("pg_basebackup", "-D", str(s.data), "-R", "-X", "stream", "-c", "fast",
               "-d", f"host=127.0.0.1 port={p.port} user=postgres application_name={STANDBY}")
        s.start()
        self._admin(p.url, f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY}'")
        self._admin(p.url, "SELECT pg_reload_conf()")
        deadline = time.monotonic() + 60
        while self._admin(p.url, "SELECT sync_state FROM pg_stat_replication "
                                 f"WHERE application_name = '{STANDBY}'") != [("sync",)]:
            assert time.monotonic() < deadline, "the standby did not become synchronous"
            time.sleep(0.1)

    @staticmethod
    def _admin(url: str, sql: str) -> list[tuple[object, ...]]:
        import psycopg

        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            cur = conn.execute(sql.encode())
            return cur.fetchall() if cur.description else []

    def url(self, **params: str) -> str:
        """Both servers in one URL: libpq connects to the one that takes writes."""
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return pg.with_query(f"postgresql://postgres@{hosts}/postgres",
                             target_session_attrs="read-write", **params)

    def fail_over(self) -> float:
        """Stop the primary hard (`-m immediate`, a crash) and promote the
        standby; when the promotion was asked (time.monotonic())."""
        self.primary.stop("immediate")
        promoted = time.monotonic()
        self.standby._run("pg_ctl", "-D", str(self.standby.data), "-w", "-t", "60", "promote")
        return promoted

    def destroy(self) -> None:
        for server in (self.standby, self.primary):
            with contextlib.suppress(Exception):
                server.destroy()  # a standby not built yet has no dir: nothing to do


@contextlib.contextmanager
def replicated() -> Iterator[Replicated]:
    r = Replicated()
    try:
        yield r
    finally:
        r.destroy()


def read_only_url(r: Replicated, **params: str) -> str:
    """The standby alone (read-only while it is one)."""
    return pg.with_query(r.standby.url, **params)

