"""A pytest fixture for the crash matrix, `crash_matrix`. Installing stead
registers this plugin with pytest (entry point `pytest11`); where plugins do
not load by themselves (PYTEST_DISABLE_PLUGIN_AUTOLOAD), put
`pytest_plugins = ["stead.testing.pytest_plugin"]` in your conftest.py. In an
async test (pytest-asyncio or anyio):

    async def test_refunds_survive_crashes(crash_matrix):
        report = await crash_matrix("shop.workflows:app", "refund_order", ["123", 4200],
                                    events={"user_confirmation": confirm},
                                    services=Services(calls=payment_calls))
        report.assert_ok()

The fixture is `stead.testing.crash_matrix` with `folder=` the test's own
temporary folder (the workers' logs stay there when a point fails).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from stead.testing import matrix
from stead.testing.report import MatrixReport


@pytest.fixture
def crash_matrix(tmp_path: Path) -> Callable[..., Awaitable[MatrixReport]]:
    """`stead.testing.crash_matrix`, working in the test's `tmp_path`."""
    run: Callable[..., Awaitable[MatrixReport]] = functools.partial(
        matrix.crash_matrix, folder=tmp_path / "crash-matrix")
    return run


__all__ = ["crash_matrix"]
