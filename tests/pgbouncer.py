"""PgBouncer for the tests: Debian's `pgbouncer` on a free port, with a
generated ini, in front of the test server, in transaction or session
pooling; a test may stop and start it again on the same port.

`STEAD_TEST_PGBOUNCER=transaction|session` makes `tests/pg.py` hand out URLs
through one such PgBouncer for the whole session (the direct URL, for what
needs a session, in STEAD_PG_DIRECT_URL), so the PostgreSQL tests run
through it. Without pgbouncer installed the tests that need it skip, saying
why, except under CI=true, where they fail.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

BINARY = "/usr/sbin/pgbouncer"
ENV = "STEAD_TEST_PGBOUNCER"
MODES = ("transaction", "session")


def missing() -> str | None:
    """Why PgBouncer cannot be started for a test, or None if it can."""
    if not (Path(BINARY).exists() or shutil.which("pgbouncer")):
        return "pgbouncer is not installed (apt-get install pgbouncer)"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run pgbouncer as"
    return None


def require() -> None:
    reason = missing()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the PgBouncer tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgBouncer:
    """One pgbouncer process in front of `server` (host, port)."""

    def __init__(
        self,
        mode: str,
        server: tuple[str, int],
        *,
        pool_size: int = 20,
        query_wait_timeout: int = 120,
    ) -> None:
        assert mode in MODES, mode
        require()
        self.mode = mode
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="stead-pgbouncer-"))
        self.ini = self.dir / "pgbouncer.ini"
        (self.dir / "users.txt").write_text('"postgres" ""\n')
        host, port = server
        self.ini.write_text(
            "[databases]\n"
            f"* = host={host} port={port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.dir / 'users.txt'}\n"
            f"pool_mode = {mode}\n"
            f"default_pool_size = {pool_size}\n"
            f"max_db_connections = {pool_size}\n"
            "max_client_conn = 1000\n"
            f"query_wait_timeout = {query_wait_timeout}\n"
            "server_reset_query = DISCARD ALL\n"
            "ignore_startup_parameters = extra_float_digits\n"
            f"logfile = {self.dir / 'log'}\n"
            f"pidfile = {self.dir / 'pid'}\n"
        )
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            shutil.chown(self.dir, self.user)
            for f in self.dir.iterdir():
                shutil.chown(f, self.user)
        self._proc: subprocess.Popen[bytes] | None = None

    def url(self, base: str) -> str:
        """`base` (a URL on the test server), through this PgBouncer."""
        parts = urlsplit(base)
        netloc = f"{parts.username or 'postgres'}@127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def start(self) -> None:
        cmd = [BINARY if Path(BINARY).exists() else "pgbouncer", str(self.ini)]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"pgbouncer did not start: {self.log()}")
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                if self._pid() is not None:  # this one's: the last one's pidfile is gone
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start: {self.log()}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop it at once (SIGTERM: every client and server connection is
        cut; SIGINT would wait for the clients to finish)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        pid = self._pid() or proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        deadline = time.monotonic() + 10
        while self._pid() is not None and time.monotonic() < deadline:
            time.sleep(0.05)  # its pidfile goes once it has let go of the port

    def restart(self) -> None:
        self.stop()
        self.start()

    def _pid(self) -> int | None:
        try:
            pid = int((self.dir / "pid").read_text().strip())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return pid

    def log(self) -> str:
        try:
            return (self.dir / "log").read_text()[-2000:]
        except OSError:
            return "(no log)"

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


_SHARED: PgBouncer | None = None


def shared(server: tuple[str, int]) -> PgBouncer | None:
    """The session's PgBouncer when STEAD_TEST_PGBOUNCER asks for one."""
    global _SHARED
    mode = os.environ.get(ENV, "")
    if not mode:
        return None
    if mode not in MODES:
        raise RuntimeError(f"{ENV} is one of {', '.join(MODES)}, not {mode!r}")
    if _SHARED is None:
        bouncer = PgBouncer(mode, server, pool_size=40)
        bouncer.start()
        atexit.register(bouncer.destroy)
        _SHARED = bouncer
    return _SHARED
