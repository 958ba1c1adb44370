"""ruff and mypy --strict stay clean: part of the suite so CI enforces them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_ruff_is_clean() -> None:
    out = _run("ruff", "check", "src", "tests")
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_strict_is_clean() -> None:
    out = _run("mypy")
    assert out.returncode == 0, out.stdout + out.stderr
