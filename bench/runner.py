"""Running a workload script in its own process, on a fresh database."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PEERS_VENV = BENCH / ".venv-peers"
PG_ADMIN = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def project_python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def peers_python() -> str:
    return str(PEERS_VENV / "bin" / "python")


@dataclasses.dataclass(frozen=True)
class System:
    """One contestant: the script it runs and the interpreter it runs in."""

    key: str  # stead, dbos, dbos_wal, langgraph, limit
    label: str
    module: str
    python: str
    extra: tuple[tuple[str, Any], ...] = ()

    def job(self, **fields: Any) -> dict[str, Any]:
        return {**dict(self.extra), **fields}


def systems() -> dict[str, System]:
    return {
        "stead": System("stead", "stead", "bench.w_stead", project_python()),
        "dbos": System("dbos", "DBOS", "bench.w_dbos", peers_python()),
        "dbos_wal": System("dbos_wal", "DBOS (WAL)", "bench.w_dbos", peers_python(),
                           (("wal", True),)),
        "langgraph": System("langgraph", "LangGraph", "bench.w_langgraph", peers_python()),
        "limit": System("limit", "1 commit/step", "bench.w_limit", project_python()),
    }


class BenchError(RuntimeError):
    pass


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get(
        "PYTHONPATH") else "")
    env.pop("STEAD_DATABASE_URL", None)
    # As an installed program runs: with its bytecode cached (pip compiles the
    # peers' at install; `warm_bytecode` compiles stead's editable source), not
    # compiling every module at every start, which was half a fresh process's CPU.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if extra:
        env.update(extra)
    return env


def warm_bytecode() -> None:
    """Compile stead's source and the bench's scripts once, as pip does for an
    installed package, so that no measured process compiles them."""
    python = project_python()
    subprocess.run([python, "-m", "compileall", "-q", "-j", "0", str(ROOT / "src")],
                   check=True, env=_env(), capture_output=True)
    # -l: the bench's own scripts, not the peers' venv beneath it
    subprocess.run([python, "-m", "compileall", "-q", "-l", str(BENCH)], check=True,
                   env=_env(), capture_output=True)


def command(system: System, job: dict[str, Any]) -> list[str]:
    return [system.python, "-m", system.module, json.dumps(job)]


def parse(line: str) -> tuple[str, Any] | None:
    tag, _, rest = line.strip().partition(" ")
    if tag.isupper() and rest.startswith("{"):
        return tag, json.loads(rest)
    return None


def run(system: System, job: dict[str, Any], *, timeout: float = 900) -> dict[str, Any]:
    """Run one workload to completion; return its RESULT."""
    proc = subprocess.run(
        command(system, job), cwd=ROOT, env=_env(), capture_output=True, text=True,
        timeout=timeout, check=False,
    )
    for line in reversed(proc.stdout.splitlines()):
        parsed = parse(line)
        if parsed and parsed[0] == "RESULT" and proc.returncode == 0:
            out: dict[str, Any] = parsed[1]
            return out
    tail = (proc.stderr or proc.stdout)[-3000:]
    raise BenchError(f"{system.label} {job.get('workload')} failed "
                     f"(exit {proc.returncode}):\n{tail}")


class Child:
    """A workload process we talk to line by line (recovery, waits)."""

    def __init__(self, system: System, job: dict[str, Any],
                 env: dict[str, str] | None = None) -> None:
        self.spawned_at = time.perf_counter()
        self.proc = subprocess.Popen(
            command(system, job), cwd=ROOT, env=_env(env), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        )
        self.label = f"{system.label} {job.get('workload')}"
        self.lines: list[tuple[str, Any]] = []
        self._cond = threading.Condition()
        self._stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True),
            threading.Thread(target=self._drain, args=(self.proc.stderr,), daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: TextIO) -> None:
        for line in stream:
            parsed = parse(line)
            if parsed is not None:
                with self._cond:
                    self.lines.append(parsed)
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _drain(self, stream: TextIO) -> None:
        for line in stream:
            self._stderr.append(line)
            del self._stderr[:-200]

    def wait_for(self, tag: str, timeout: float, count: int = 1) -> list[Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [p for t, p in self.lines if t == tag]
                if len(found) >= count:
                    return found
                if self.proc.poll() is not None and not any(
                        t == tag for t, _ in self.lines[len(found):]):
                    # exited: one last look, then fail
                    found = [p for t, p in self.lines if t == tag]
                    if len(found) >= count:
                        return found
                    raise BenchError(f"{self.label} exited ({self.proc.returncode}) before "
                                     f"{tag}:\n{''.join(self._stderr)[-3000:]}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"{self.label}: no {tag} after {timeout}s "
                                     f"({len(found)}/{count}):\n"
                                     f"{''.join(self._stderr)[-3000:]}")
                self._cond.wait(min(left, 0.5))

    def send_line(self, text: str = "") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def close(self) -> None:
        """Kill it if it still runs, and close its pipes once read to the end."""
        self.kill()
        for reader in self._readers:
            reader.join(10)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):  # a stdin whose reader is gone
                    pipe.close()

    def finish(self, timeout: float) -> dict[str, Any]:
        result: dict[str, Any] = self.wait_for("RESULT", timeout)[0]
        self.proc.wait(timeout=30)
        return result


# -- databases --------------------------------------------------------------------------
_counter = itertools.count()


def pg_available() -> str | None:
    """None if PostgreSQL answers at PG_ADMIN, else why not."""
    try:
        import psycopg
    except ImportError as exc:
        return f"psycopg is not importable here ({exc})"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"PostgreSQL at {PG_ADMIN} does not answer ({exc})"
    return None


def _pg_admin() -> Any:
    import psycopg

    return psycopg.connect(PG_ADMIN, autocommit=True)


def _pg_url(name: str) -> str:
    base, _, _ = PG_ADMIN.rpartition("/")
    return f"{base}/{name}"


@contextlib.contextmanager
def fresh_database(db: str, scratch: Path) -> Iterator[str]:
    """A URL to an empty database, removed afterwards: a SQLite file in
    `scratch`, or a new PostgreSQL database."""
    n = next(_counter)
    if db == "sqlite":
        folder = scratch / f"db{n}"
        folder.mkdir()
        try:
            yield f"sqlite:///{folder}/bench.db"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    from psycopg import sql

    name = f"stead_bench_{os.getpid()}_{n}"
    with _pg_admin() as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _pg_url(name)
    finally:
        with _pg_admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


def pg_transactions(url: str) -> int:
    """Transactions committed in the database of `url` (pg_stat_database), read
    once no backend is connected to it any more (a backend flushes its counts
    when it exits)."""
    name = url.rpartition("/")[2]
    deadline = time.monotonic() + 15
    with _pg_admin() as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                               (name,)).fetchone()
            if row is not None and row[0] == 0:
                break
            time.sleep(0.05)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                           (name,)).fetchone()
    return int(row[0]) if row else 0


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="stead-bench-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def write_section(text: str, path: Path, begin: str, end: str) -> None:
    """Put `text` (which starts with `begin` and ends with `end`) in place of
    the section between those markers in `path`, or at its end."""
    current = path.read_text() if path.exists() else ""
    if begin in current and end in current:
        head, _, rest = current.partition(begin)
        _, _, tail = rest.partition(end)
        path.write_text(head + text + tail)
    else:
        path.write_text(current.rstrip("\n") + "\n\n" + text + "\n")


@contextlib.contextmanager
def checkout(ref: str) -> Iterator[Path]:
    """stead's source at git ref `ref`, in a scratch worktree removed after
    (a bench's `--before REF`: the code a change is judged against)."""
    folder = Path(tempfile.mkdtemp(prefix="stead-bench-before-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet",
                    str(folder), ref], check=True)
    try:
        yield folder / "src"
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                        str(folder)], check=False)


def code_env(src: Path | None) -> dict[str, str]:
    """The environment of a bench's child process that runs stead's code
    from `src` (None: this checkout's, as installed)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT)])
    return env


def quantile(values: list[float], q: float) -> float:
    """The `q` quantile of `values` (nearest rank, from below)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextlib.contextmanager
def codes(before: str | None) -> Iterator[list[tuple[str, Path | None]]]:
    """The code a bench's rows are measured with, each as (label, stead's
    source; None: this checkout's): this checkout's, and with `before` (a
    git ref) that ref's first, in turn, so a change is judged in one run."""
    if before is None:
        yield [("", None)]
        return
    with checkout(before) as src:
        yield [(f"before ({before})", src), ("after", None)]


def publish(text: str, begin: str, end: str, write: bool) -> None:
    """Print a bench's section and, with `write`, put it in RESULTS.md."""
    print(text)
    if write:
        write_section(text, BENCH / "RESULTS.md", begin, end)
