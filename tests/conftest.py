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
