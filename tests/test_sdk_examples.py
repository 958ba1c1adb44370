"""The SDK examples run as a user runs them, offline, and stay short."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.mark.parametrize(("name", "expected"), [
    ("openai_agent.py", "The tools said: ['{\"city\": \"Paris\", \"celsius\": 18}']\n"),
    ("anthropic_agent.py", "The tools said: ['{\"city\": \"Paris\", \"celsius\": 18}']\n"
                           "-> The tools said: ['{\"city\": \"Paris\", \"celsius\": 18}']\n"),
])
def test_an_sdk_example_runs_offline(name: str, expected: str, tmp_path: Path) -> None:
    path = EXAMPLES / name
    assert len(path.read_text().splitlines()) <= 40
    out = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == expected
