from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import stead


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/stead.db"


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[stead.Store]:
    s = await stead.open_store(db_url)
    yield s
    await s.close()


@pytest.fixture
def clock() -> stead.FakeClock:
    return stead.FakeClock()


@pytest.fixture
async def fstore(db_url: str, clock: stead.FakeClock) -> AsyncIterator[stead.Store]:
    """A store on a fake clock: tests expire leases by moving `clock`."""
    s = await stead.open_store(db_url, clock=clock)
    yield s
    await s.close()
