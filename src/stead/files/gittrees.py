"""What git says of a workspace that is a repository's top: the commit it is
on, the uncommitted patch (binary-safe, against that commit) and the
untracked files. Asked through the git CLI, with argument lists (no shell);
without git, or outside a repository's top, there is nothing to say.

Asking changes nothing in the repository, `.git/index` included: the index is
part of the saved tree, so a byte git changed there would be a change no step
made, and the next save would store a snapshot for it. `git diff` rewrites the
index whenever it finds files whose cached times are stale but whose contents
are not (it refreshes the times), which is every file of a restored tree (a
restore writes each file anew), and it does so whatever
`--no-optional-locks` says. So the diff runs on a private copy of the index
(`GIT_INDEX_FILE`): it answers as over the real one, and its refresh lands in
the copy, thrown away. Leaving `.git/index` out of the tree instead would lose
what a step stages, and skipping the refresh (`diff.autoRefreshIndex=false`)
would put an empty header for each such file in the patch."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
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


def _git(top: Path, *args: str, env: Mapping[str, str] | None = None) -> bytes | None:
    try:
        done = subprocess.run(["git", "--no-optional-locks", "-C", str(top), *args],
                              capture_output=True, check=False, timeout=60,
                              env=None if env is None else {**os.environ, **env})
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _patch(top: Path, index: Path) -> bytes | None:
    """`git diff --binary HEAD`, run on a copy of the index at `index` (see the module)."""
    with tempfile.TemporaryDirectory(prefix="stead-git-") as scratch:
        private = Path(scratch, "index")
        try:
            # With its times: git trusts an entry's cached times only if the
            # index was written after the file (the "racy git" rule).
            shutil.copy2(index, private)
        except FileNotFoundError:
            pass  # no index yet: git reads a missing one as empty, as it would the real one
        except OSError:
            return None
        return _git(top, "diff", "--binary", "HEAD", env={"GIT_INDEX_FILE": str(private)})


def state(top: Path) -> GitState | None:
    """The repository's state if `top` is a git work tree's top; else None."""
    if shutil.which("git") is None or not (top / ".git").exists():
        return None
    found = _git(top, "rev-parse", "--show-toplevel", "--git-path", "index")
    lines = [] if found is None else found.decode().splitlines()
    if len(lines) != 2 or Path(lines[0]).resolve() != top.resolve():
        return None
    head = _git(top, "rev-parse", "--verify", "HEAD")
    if head is None:  # a repository without a commit yet: only the tree travels
        return None
    branch = _git(top, "symbolic-ref", "--short", "-q", "HEAD")
    patch = _patch(top, top / lines[1]) or b""
    listed = _git(top, "ls-files", "--others", "--exclude-standard", "-z") or b""
    untracked = tuple(sorted(p.decode(errors="replace") for p in listed.split(b"\0") if p))
    return GitState(head.decode().strip(), branch.decode().strip() if branch else None,
                    patch, untracked)


def head(top: Path) -> str | None:
    """The commit `top` is on, or None."""
    found = _git(top, "rev-parse", "--verify", "HEAD")
    return None if found is None else found.decode().strip()
