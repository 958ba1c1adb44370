"""Fixtures. Every test that takes `db_url` (or `store`, `fstore`) runs twice:
on SQLite and on PostgreSQL (a fresh schema per test, see tests/pg.py).
A test about SQLite itself (its file, its locks, raw sqlite3) is marked
`sqlite_only` and runs once."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import stead
import stead.keys
from tests import ops_app, pg, stress
from tests.workers.procs import Workers

BACKENDS = ("sqlite", "postgres")
# Offline: LiteLLM (stead.llm.litellm, CrewAI's models) reads its bundled price
# list instead of fetching one when imported, here and in the workers started.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The processes the tests start cache no bytecode: a test that deploys changed
# code rewrites its app module within the same second and at the same size,
# which a cached .pyc (keyed by the source's mtime in whole seconds and its
# size) takes for the old module, so the old code would run.
os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    stress.add_option(parser)
    stress.add_full_option(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sqlite_only: a test of SQLite itself; db_url is only ever a SQLite URL"
    )
    if config.getoption("--full"):
        os.environ[stress.FULL_ENV] = "1"  # read as test modules are imported
    if stress.wanted(config):
        stress.start(config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return stress.report(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    stress.leave_out_slow(config, items)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    said = stress.left_out(terminalreporter.config)
    if said:
        terminalreporter.write_line(said)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        only = metafunc.definition.get_closest_marker("sqlite_only") is not None
        metafunc.parametrize("backend", ["sqlite"] if only else list(BACKENDS), indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="session")
def shared_key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One key file for every PostgreSQL test, as the machines sharing a
    server share one (an SQLite database gets its own beside it)."""
    path = tmp_path_factory.mktemp("keys") / "keys"
    stead.keys.add_key(path)
    stead.keys.rotate(path)  # a data key, for runs with STEAD_ENCRYPT=1
    return path


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path}/stead.db"
    else:
        request.getfixturevalue("pg_keys")
        with pg.fresh_schema() as url:
            yield url


@pytest.fixture
def data_keys(backend: str, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PostgreSQL test's own key file with a data key to seal payloads with
    (an SQLite file makes its own beside it); after `db_url`, whose key file
    it replaces."""
    if backend == "postgres":
        path = tmp_path / "keys"
        stead.keys.add_key(path)
        stead.keys.rotate(path)
        monkeypatch.setenv(stead.keys.KEY_FILE_ENV, str(path))


@pytest.fixture
def pg_keys(shared_key_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers and clients on PostgreSQL (in this process and in the ones it
    starts) sign and check wait tokens with the shared key file."""
    monkeypatch.setenv(stead.keys.KEY_FILE_ENV, str(shared_key_file))


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/stead.db"


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[stead.Store]:
    s = await stead.open_store(db_url)
    yield s
    await s.close()


@pytest.fixture
def workers(tmp_path: Path, db_url: str) -> Iterator[Workers]:
    """Worker processes a test starts on its store; stopped when it ends."""
    w = Workers(tmp_path, db_url)
    yield w
    w.stop_all()


@pytest.fixture
def clock() -> stead.FakeClock:
    return stead.FakeClock()


@pytest.fixture
async def fstore(db_url: str, clock: stead.FakeClock) -> AsyncIterator[stead.Store]:
    """A store on a fake clock, leases judged by it too: tests expire leases
    by moving `clock`."""
    s = await stead.open_store(db_url, clock=clock, lease_clock=clock)
    yield s
    await s.close()


# -- PostgreSQL only ----------------------------------------------------------------
@pytest.fixture
def pg_url(pg_keys: None) -> Iterator[str]:
    with pg.fresh_schema() as url:
        yield url


@pytest.fixture
def new_pg_url(pg_keys: None) -> Iterator[str]:
    """A URL on a schema that does not exist yet (`pg_url`'s is already made)."""
    with pg.fresh_schema(new=True) as url:
        yield url


@pytest.fixture
async def pstore(pg_url: str) -> AsyncIterator[stead.Store]:
    s = await stead.open_store(pg_url)
    yield s
    await s.close()


@pytest.fixture
async def proxy() -> AsyncIterator[pg.Proxy]:
    """A TCP proxy in front of the server, to lose answers and drop connections."""
    pg.require()
    async with pg.Proxy(pg.server_address()) as p:
        yield p


@pytest.fixture
def app_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"opsapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(ops_app.APP_SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield f"{name}:app"
    sys.modules.pop(name, None)


@pytest.fixture
def sdk_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder the SDK integrations' test apps (tests/workers/*_app.py)
    write what the outside world sees to."""
    monkeypatch.setenv("SDK_DIR", str(tmp_path))
    return tmp_path
