"""The import contracts in pyproject.toml ([tool.importlinter]) hold, and they
bite: an import against the layering, made in a copy of the package, breaks
them and the report names it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "pyproject.toml"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _contract_names() -> dict[str, str]:
    config = tomllib.loads(CONFIG.read_text())
    return {c["id"]: c["name"] for c in config["tool"]["importlinter"]["contracts"]}


def _lint_imports(source_root: Path) -> subprocess.CompletedProcess[str]:
    """Check the contracts against the `stead` package found in `source_root`."""
    env = {**os.environ, "PYTHONPATH": str(source_root), "COLUMNS": "200"}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(CONFIG)],
        cwd=source_root, env=env, capture_output=True, text=True, timeout=120,
    )


def test_the_import_contracts_are_kept() -> None:
    out = _lint_imports(ROOT / "src")
    assert out.returncode == 0, out.stdout + out.stderr
    for name in _contract_names().values():
        assert f"{name} KEPT" in out.stdout, out.stdout


@pytest.mark.parametrize(
    ("module", "injected", "offending", "broken"),
    [
        # the store reaching up into the worker: a layer violation and a cycle
        ("store/__init__.py", "from stead import worker", "stead.store -> stead.worker",
         ["layers", "store-knows-no-workflow", "acyclic"]),
        # the seam reaching up into the store's logic, one backend into the other
        ("store/seam.py", "from stead.store import base", "stead.store.seam -> stead.store.base",
         ["store-seam", "acyclic"]),
        ("store/sqlite/journal.py", "from stead.store.postgres import journal",
         "stead.store.sqlite.journal -> stead.store.postgres.journal", ["store-seam"]),
        # a command helper importing the root group back, or a command
        ("cli/common.py", "import stead.cli", "stead.cli.common -> stead.cli", ["cli-root"]),
        ("cli/common.py", "from stead.cli import runs", "stead.cli.common -> stead.cli.runs",
         ["cli-commands"]),
    ],
)
def test_an_import_against_the_layers_breaks_them(
    tmp_path: Path, module: str, injected: str, offending: str, broken: list[str]
) -> None:
    shutil.copytree(ROOT / "src" / "stead", tmp_path / "stead",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with (tmp_path / "stead" / module).open("a") as f:
        f.write(f"\n{injected}  # against the layers\n")

    out = _lint_imports(tmp_path)

    report = out.stdout + out.stderr
    assert out.returncode == 1, report
    assert offending in out.stdout, report
    names = _contract_names()
    for contract in broken:
        assert f"{names[contract]} BROKEN" in out.stdout, report


def test_every_module_has_a_place_in_the_layers() -> None:
    """A new module left out of the layers contract would escape it."""
    config = tomllib.loads(CONFIG.read_text())
    (layers,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers"]
    placed = {name.strip().strip("()") for layer in layers["layers"] for name in layer.split("|")}
    package = ROOT / "src" / "stead"
    modules = {f"stead.{p.stem}" for p in package.glob("*.py") if p.stem not in {
        "__init__", "__main__"}}
    modules |= {f"stead.{p.name}" for p in package.iterdir() if (p / "__init__.py").exists()}
    # A package split across layers (stead.metrics: its counters below the store,
    # its scrape above) is placed module by module: each of its modules is.
    split = {m for m in modules - placed if any(n.startswith(f"{m}.") for n in placed)}
    for name in split:
        parts = {f"{name}.{p.stem}" for p in (package / name.split(".")[1]).glob("*.py")
                 if p.stem != "__init__"}
        assert parts <= placed, f"not in the layers contract: {sorted(parts - placed)}"
    modules -= split
    assert modules <= placed, f"not in the layers contract: {sorted(modules - placed)}"
