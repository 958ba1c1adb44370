"""Environment fingerprints: what a step's result was made in.

`run.step("test", run_tests, ..., fresh=stead.Fingerprint(workspace=ws,
files=["uv.lock"], image="python:3.12", extra={...}))` journals, with the
step, the fingerprint of its environment: the workspace's last snapshot (its
commit and tree hash), the sha256 of each file, the image and the extra
values. On replay the fingerprint is taken again: while it is the same, the
recorded result is reused; when it differs (another lockfile on the new
worker, another image) the result no longer holds: the call is classified
`revalidate` and made again (see `Run.step`), or, if an effect followed it,
the run pauses for a person.

Relative file paths resolve against the workspace's top when `workspace=`
is given, else the worker's current directory (the machine the step runs
on).

A step of a run with a workspace is bound to its environment by default
when it reads the workspace (an argument is a `WorkspacePath`: `ws.path` or
a path in it): its fingerprint holds `lockfiles` (the sha256 of each of
`LOCKFILES` at the workspace's top) and `runtime` (the Python version, the
platform, the image id in `$STEAD_IMAGE`, the workspace's commit). Once the
workspace has a snapshot, its tree hash stands for the lockfiles: a takeover
restores them hash-equal. `Fingerprint(environment=False)` opts a step out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import platform
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stead import codec

# Every step asks whether `fresh` is a `Fingerprint`; only a run with a
# workspace, or a fingerprint naming one or files, needs what reads them.
if TYPE_CHECKING:
    from pathlib import Path

    from stead.workflow.workspaces import Workspace

# The lockfiles an environment fingerprint hashes, at the workspace's top
# (`requirements*.txt`: every file of that pattern).
LOCKFILES = ("uv.lock", "poetry.lock", "requirements*.txt", "package-lock.json",
             "pnpm-lock.yaml", "Cargo.lock", "go.sum")
IMAGE_ENV = "STEAD_IMAGE"  # the image (container) id the worker runs in, if set
# The parts the environment adds: a fingerprint recorded without them (by
# code from before they existed) is not judged on them.
ENVIRONMENT_PARTS = ("lockfiles", "runtime")


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """See the module. Every part is optional; JSON-able `extra` values only."""

    workspace: Workspace | None = None
    files: Sequence[str] = ()
    image: str | None = None
    extra: Any = None
    # Whether the environment (see the module) is part of it: None binds it
    # when the step reads a workspace, False never.
    environment: bool | None = None

    def __post_init__(self) -> None:
        if self.workspace is not None:
            from stead.workflow.workspaces import Workspace

            if not isinstance(self.workspace, Workspace):
                raise TypeError(
                    "Fingerprint(workspace=) takes the Workspace run.workspace returned")
        if isinstance(self.files, str) or not all(isinstance(f, str) for f in self.files):
            raise TypeError("Fingerprint(files=) is a list of paths")
        if self.image is not None and not isinstance(self.image, str):
            raise TypeError("Fingerprint(image=) is a string")
        codec.dumps(self.extra, what="a fingerprint's extra values")
        if self.environment not in (None, True, False):
            raise TypeError("Fingerprint(environment=) is True, False or None")

    async def take(self, reads: Workspace | None = None) -> dict[str, Any]:
        """The fingerprint now, as JSON-able parts; with the environment of
        `reads` (the workspace the step reads) unless `environment=False`."""
        parts: dict[str, Any] = {}
        if self.workspace is not None:
            snap = self.workspace.snapshot
            parts["workspace"] = {"name": self.workspace.name,
                                  "commit": None if snap is None else snap.commit,
                                  "tree": None if snap is None else snap.tree}
        if self.files:
            top = None if self.workspace is None else self.workspace.dir
            parts["files"] = await asyncio.to_thread(_hashes, self.files, top)
        if self.image is not None:
            parts["image"] = self.image
        if self.extra is not None:
            parts["extra"] = codec.loads(codec.dumps(self.extra, what="a fingerprint"))
        bound = reads or (self.workspace if self.environment else None)
        if self.environment is not False and bound is not None:
            parts.update(await environment(bound))
        return parts


async def environment(ws: Workspace) -> dict[str, Any]:
    """The environment parts of a step that reads `ws` (see the module)."""
    snap = ws.snapshot
    parts: dict[str, Any] = {"runtime": {
        "python": platform.python_version(), "platform": f"{sys.platform}-{platform.machine()}",
        "image": os.environ.get(IMAGE_ENV) or None,
        "commit": None if snap is None else snap.commit}}
    if snap is None:
        parts["lockfiles"] = await asyncio.to_thread(_lockfiles, ws.dir)
    else:
        parts["lockfiles"] = {"tree": snap.tree}
    return parts


def _lockfiles(top: Path) -> dict[str, str | None]:
    names = sorted({p.name for pattern in LOCKFILES for p in top.glob(pattern)
                    if p.is_file() and not p.is_symlink()})
    return _hashes(names, top)


def _hashes(files: Sequence[str], top: Path | None) -> dict[str, str | None]:
    """Each file's sha256 (relative ones under `top`, if given); None for a
    file that is not there."""
    from pathlib import Path

    from stead.files import trees

    found: dict[str, str | None] = {}
    for name in files:
        path = Path(name) if top is None else top / name
        found[name] = trees.file_sha256(path) if path.is_file() else None
    return found


def judged(before: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """`now` without the environment parts `before` was recorded without."""
    return {k: v for k, v in now.items() if k in before or k not in ENVIRONMENT_PARTS}


def read(args: Sequence[Any], kwargs: dict[str, Any],
         spaces: Sequence[Workspace]) -> Workspace | None:
    """The attached workspace a step's arguments read (one is a path in it)."""
    from stead.workflow.workspaces import WorkspacePath

    named = {ws.name: ws for ws in spaces}
    for value in [*args, *kwargs.values()]:
        found = named.get(getattr(value, "name", None) or "") \
            if isinstance(value, WorkspacePath) else None
        if found is not None:
            return found
    return None


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints, one line a part."""
    lines = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            for sub in sorted(old.keys() | new.keys()):
                if old.get(sub) != new.get(sub):
                    lines.append(f"{key}.{sub}: {_short(old.get(sub))} -> {_short(new.get(sub))}")
        else:
            lines.append(f"{key}: {_short(old)} -> {_short(new)}")
    return lines


def _short(value: Any) -> str:
    text = codec.dumps(value, what="a fingerprint")
    return text if len(text) <= 20 else f"{text[:16]}…"
