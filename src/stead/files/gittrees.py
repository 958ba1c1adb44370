"""What git says of a workspace that is a repository's top: the commit it is
on, the uncommitted patch (binary-safe, against that commit) and the
untracked files. Asked through the git CLI, with argument lists (no shell);
without git, or outside a repository's top, there is nothing to say."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import subprocess
from pathlib import Path


@dataclasses.dataclass(frozen=True, slots=True)
class GitState:
    commit: str
    branch: str | None
    patch: bytes
    untracked: tuple[str, ...]

    @property
    def patch_sha256(self) -> str:
        return hashlib.sha256(self.patch).hexdigest()

    @property
    def dirty(self) -> bool:
        return bool(self.patch or self.untracked)

    def to_json(self) -> dict[str, object]:
        return {"commit": self.commit, "branch": self.branch, "dirty": self.dirty,
                "patch_sha256": self.patch_sha256 if self.patch else None,
                "patch_bytes": len(self.patch), "untracked": list(self.untracked)}


def _git(top: Path, *args: str) -> bytes | None:
    try:
        done = subprocess.run(["git", "-C", str(top), *args], capture_output=True,
                              check=False, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def state(top: Path) -> GitState | None:
    """The repository's state if `top` is a git work tree's top; else None."""
    if shutil.which("git") is None or not (top / ".git").exists():
        return None
    found = _git(top, "rev-parse", "--show-toplevel")
    if found is None or Path(found.decode().strip()).resolve() != top.resolve():
        return None
    head = _git(top, "rev-parse", "--verify", "HEAD")
    if head is None:  # a repository without a commit yet: only the tree travels
        return None
    branch = _git(top, "symbolic-ref", "--short", "-q", "HEAD")
    patch = _git(top, "diff", "--binary", "HEAD") or b""
    listed = _git(top, "ls-files", "--others", "--exclude-standard", "-z") or b""
    untracked = tuple(sorted(p.decode(errors="replace") for p in listed.split(b"\0") if p))
    return GitState(head.decode().strip(), branch.decode().strip() if branch else None,
                    patch, untracked)


def head(top: Path) -> str | None:
    """The commit `top` is on, or None."""
    found = _git(top, "rev-parse", "--verify", "HEAD")
    return None if found is None else found.decode().strip()
