"""What the numbers were measured on: the machine, the databases, the versions."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from typing import Any

from bench import runner

PEER_PACKAGES = ("dbos", "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite",
                 "langgraph-checkpoint-postgres", "SQLAlchemy", "psycopg", "psycopg-pool")
PROJECT_PACKAGES = ("stead", "psycopg", "psycopg-pool", "pydantic")

_PROBE = """
import json, sqlite3, sys
from importlib import metadata
names = json.loads(sys.argv[1])
versions = {}
for n in names:
    try:
        versions[n] = metadata.version(n)
    except metadata.PackageNotFoundError:
        versions[n] = None
print(json.dumps({"python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version,
                  "packages": versions}))
"""


def probe(python: str, packages: tuple[str, ...]) -> dict[str, Any]:
    out = subprocess.run([python, "-c", _PROBE, json.dumps(packages)], capture_output=True,
                         text=True, check=True, timeout=60)
    info: dict[str, Any] = json.loads(out.stdout)
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_head() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=runner.ROOT,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=runner.ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + (" + uncommitted changes in src/" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _pg() -> dict[str, str] | None:
    if runner.pg_available() is not None:
        return None
    import psycopg

    with psycopg.connect(runner.PG_ADMIN, autocommit=True) as conn:
        info = {}
        for name in ("server_version", "synchronous_commit", "fsync", "wal_sync_method",
                     "shared_buffers"):
            row = conn.execute(f"SHOW {name}").fetchone()  # fixed names above
            info[name] = str(row[0]) if row else "?"
        return info


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def load_now() -> str:
    return _load()


def describe(peers: bool) -> dict[str, Any]:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gib": round(mem / 2**30, 1),
        "kernel": platform.release(),
        "load_before": _load(),
        "stead_commit": _git_head(),
        "project": probe(runner.project_python(), PROJECT_PACKAGES),
        "postgres": _pg(),
    }
    if peers:
        info["peers"] = probe(runner.peers_python(), PEER_PACKAGES)
    return info
