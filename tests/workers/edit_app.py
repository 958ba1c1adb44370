"""A workflow that edits its workspace in one step and then holds, without
an explicit save: for the process test that SIGKILLs its worker while it
holds (tests/test_workspace_processes.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import stead

app = stead.App("editor")


def edit(repo: stead.WorkspacePath, ledger: str) -> bool:
    """Fix calc.py, noting the worker that did it in `ledger`."""
    with open(ledger, "a") as out:
        out.write(f"edit {os.getpid()}\n")
    file = Path(repo, "calc.py")
    file.write_text(file.read_text().replace("a - b", "a + b"))
    return True


async def hold(ledger: str, gate: str) -> str:
    """Note that it runs, then hold until the `gate` file exists."""
    with open(ledger, "a") as out:
        out.write(f"hold {os.getpid()}\n")
    while not Path(gate).exists():
        await asyncio.sleep(0.05)
    return "open"


@app.workflow()
async def edit_then_hold(run: stead.Run, repo: str, ledger: str, gate: str) -> dict[str, str]:
    ws = await run.workspace("repo", repo)
    await run.step("edit", edit, ws.path, ledger)
    await run.step("hold", hold, ledger, gate)
    return {"path": str(ws.path), "calc": Path(ws.path, "calc.py").read_text()}
