"""The peers' own virtual environment (bench/.venv-peers, git-ignored), made
and filled by the bench itself with the latest DBOS and LangGraph."""

from __future__ import annotations

import subprocess
import sys

from bench import runner

PACKAGES = (
    "dbos",
    "langgraph",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "psycopg[binary]",
    "psycopg-pool",
)


def ensure(*, upgrade: bool, log: object = print) -> None:
    """Create the venv if it is missing; install (or upgrade) the peers."""
    python = runner.PEERS_VENV / "bin" / "python"
    fresh = not python.exists()
    if fresh:
        _say(log, f"creating {runner.PEERS_VENV} ...")
        subprocess.run([sys.executable, "-m", "venv", str(runner.PEERS_VENV)], check=True)
    if fresh or upgrade:
        _say(log, "installing the peers (latest): " + ", ".join(PACKAGES))
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"],
                       check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", *PACKAGES],
                       check=True)


def _say(log: object, text: str) -> None:
    if callable(log):
        log(text)
