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

Relative file paths are read from the worker's current directory: they
describe the machine the step runs on. The workspace's own files are covered
by its snapshot, which a takeover restores hash-equal before replay.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stead import codec, trees
from stead.workspaces import Workspace


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """See the module. Every part is optional; JSON-able `extra` values only."""

    workspace: Workspace | None = None
    files: Sequence[str] = ()
    image: str | None = None
    extra: Any = None

    def __post_init__(self) -> None:
        if self.workspace is not None and not isinstance(self.workspace, Workspace):
            raise TypeError("Fingerprint(workspace=) takes the Workspace run.workspace returned")
        if isinstance(self.files, str) or not all(isinstance(f, str) for f in self.files):
            raise TypeError("Fingerprint(files=) is a list of paths")
        if self.image is not None and not isinstance(self.image, str):
            raise TypeError("Fingerprint(image=) is a string")
        codec.dumps(self.extra, what="a fingerprint's extra values")

    async def take(self) -> dict[str, Any]:
        """The fingerprint now, as JSON-able parts."""
        parts: dict[str, Any] = {}
        if self.workspace is not None:
            snap = self.workspace.snapshot
            parts["workspace"] = {"name": self.workspace.name,
                                  "commit": None if snap is None else snap.commit,
                                  "tree": None if snap is None else snap.tree}
        if self.files:
            parts["files"] = await asyncio.to_thread(_hashes, self.files)
        if self.image is not None:
            parts["image"] = self.image
        if self.extra is not None:
            parts["extra"] = codec.loads(codec.dumps(self.extra, what="a fingerprint"))
        return parts


def _hashes(files: Sequence[str]) -> dict[str, str | None]:
    """Each file's sha256; None for a file that is not there."""
    found: dict[str, str | None] = {}
    for name in files:
        path = Path(name)
        found[name] = trees.file_sha256(path) if path.is_file() else None
    return found


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
