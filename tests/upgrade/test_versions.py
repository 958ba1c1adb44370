"""The version moves with the schema: CHANGELOG.md names each release's schema
version, the newest is this code's (its version in pyproject.toml and
`stead.__version__`), a database written by each earlier release is kept to
upgrade (tests/upgrade/fixtures), and a migration that shipped in a release
is never edited again."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import stead
from stead.store import schema_versions
from tests.upgrade import restore

ROOT = Path(__file__).resolve().parents[2]
RELEASE = re.compile(r"^## (?P<version>\d+\.\d+\.\d+) — schema (?P<schema>\d+)$", re.MULTILINE)
SQL = ROOT / "src" / "stead" / "store"
RELEASED = Path(__file__).with_name("released-migrations.sha256")


def _releases() -> list[tuple[tuple[int, ...], int]]:
    text = (ROOT / "CHANGELOG.md").read_text()
    return [(tuple(int(n) for n in m["version"].split(".")), int(m["schema"]))
            for m in RELEASE.finditer(text)]


def test_the_newest_release_is_this_code_and_its_schema() -> None:
    [(newest, schema), *_] = _releases()
    assert schema == schema_versions.latest(), (
        f"migration {schema_versions.latest():04d} is newer than the schema of the newest "
        "release in CHANGELOG.md: add a release for it and move the version (pyproject.toml, "
        "stead/release.py)")
    assert ".".join(map(str, newest)) == stead.__version__
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == stead.__version__


def test_a_schema_change_moves_the_version() -> None:
    releases = _releases()
    versions = [v for v, _ in releases]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
    schemas = [s for _, s in releases]
    assert schemas == sorted(schemas, reverse=True), "a release needs an older schema than "\
        "the one before it"


def test_stead_version_says_the_release_and_its_schema() -> None:
    done = subprocess.run([sys.executable, "-m", "stead", "--version"], capture_output=True,
                          text=True, check=True)
    assert done.stdout == f"stead {stead.__version__} (schema {schema_versions.latest()})\n"


def test_a_database_of_each_earlier_release_is_kept_to_upgrade() -> None:
    kept = {f.schema for f in restore.every()}
    earlier = {schema for _, schema in _releases()[1:]}
    assert earlier <= kept, f"no upgrade fixture of schema(s) {sorted(earlier - kept)}: make " \
                            "one with tests/upgrade/make_fixture.py"


def test_a_released_migration_is_never_edited() -> None:
    """Every migration up to the schema of the release before this one is as
    it shipped: a database that applied it has it so. Change a schema with a
    new migration; at a release, add its files to the list."""
    [_, (_, shipped), *_] = _releases()
    recorded = dict(reversed(line.split("  ")) for line in RELEASED.read_text().splitlines())
    files = sorted(str(p.relative_to(SQL)) for p in SQL.glob("*/sql/0*.sql")
                   if int(p.name[:4]) <= shipped)
    assert sorted(recorded) == files
    changed = [name for name in files
               if hashlib.sha256((SQL / name).read_bytes()).hexdigest() != recorded[name]]
    assert not changed, f"released migrations were edited: {changed}; write a new one instead"
