"""A directory as a content-addressed tree: its manifest (every file,
directory and symbolic link, with its mode, size and sha256), the tree's hash,
and writing a manifest back into a fresh directory.

It knows no run and no store: `stead.workspaces` saves a scanned tree's blobs
and restores them. The rules that keep a tree portable are checked while
scanning, before anything is stored: the directory lies inside the allowed
root, no symbolic link leads out of it, and its files add up to no more than
the limit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath

from stead import errors

FILE, DIR, LINK = "file", "dir", "link"
_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One path of the tree (POSIX, relative to its top). A file has its
    sha256 and size; a link its target (relative, inside the tree)."""

    path: str
    kind: str
    mode: int
    size: int = 0
    sha256: str = ""
    target: str = ""

    def to_json(self) -> list[object]:
        return [self.path, self.kind, self.mode, self.size, self.sha256 or self.target]

    @classmethod
    def from_json(cls, row: Sequence[object]) -> Entry:
        """An entry read back from a stored manifest, refused (ValueError) if
        it would write or point outside the tree it is restored into."""
        path, kind, mode, size, ref = row
        if kind not in (FILE, DIR, LINK):
            raise ValueError(f"unknown entry kind {kind!r}")
        entry = cls(str(path), str(kind), int(str(mode)), int(str(size)),
                    str(ref) if kind == FILE else "", str(ref) if kind == LINK else "")
        where = PurePosixPath(entry.path)
        if where.is_absolute() or ".." in where.parts or not where.parts:
            raise ValueError(f"entry path {entry.path!r} leads out of the tree")
        if kind == LINK and (PurePosixPath(entry.target).is_absolute() or os.path.normpath(
                where.parent / entry.target).startswith("..")):
            raise ValueError(f"link {entry.path!r} points out of the tree")
        return entry


@dataclasses.dataclass(frozen=True, slots=True)
class Tree:
    entries: tuple[Entry, ...]

    @property
    def manifest(self) -> str:
        """The entries as canonical JSON text: what the tree hash covers."""
        return json.dumps([e.to_json() for e in self.entries], separators=(",", ":"))

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.manifest.encode()).hexdigest()

    @property
    def files(self) -> int:
        return sum(1 for e in self.entries if e.kind == FILE)

    @property
    def bytes(self) -> int:
        return sum(e.size for e in self.entries)

    def blobs(self) -> dict[str, str]:
        """Each distinct content's hash, and one path that holds it."""
        found: dict[str, str] = {}
        for e in self.entries:
            if e.kind == FILE:
                found.setdefault(e.sha256, e.path)
        return found

    @classmethod
    def loads(cls, manifest: str) -> Tree:
        return cls(tuple(Entry.from_json(row) for row in json.loads(manifest)))


def inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def checked_dir(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> Path:
    """`path`, resolved, if it is a directory inside `root` (also resolved)."""
    top, base = Path(path).resolve(), Path(root).resolve()
    if not inside(top, base):
        raise errors.WorkspaceOutsideRoot(
            f"{top} is not inside the allowed root {base}: attach a directory under it, or "
            "set the root (root=, $STEAD_WORKSPACE_ROOT)")
    if not top.is_dir():
        raise errors.WorkspaceError(f"{top} is not a directory")
    return top


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def scan(top: Path, max_bytes: int | None = None) -> Tree:
    """The tree of `top` (a resolved directory). Raises `WorkspaceEscape` for
    a link leading out of it, `WorkspaceTooLarge` past `max_bytes`."""
    entries: list[Entry] = []
    total = 0
    for path in _walk(top):
        rel = path.relative_to(top).as_posix()
        info = path.lstat()
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISLNK(info.st_mode):
            entries.append(Entry(rel, LINK, 0, target=_link_target(top, path)))
        elif stat.S_ISDIR(info.st_mode):
            entries.append(Entry(rel, DIR, mode))
        elif stat.S_ISREG(info.st_mode):
            total += info.st_size
            if max_bytes is not None and total > max_bytes:
                raise errors.WorkspaceTooLarge(
                    f"{top} holds more than its limit of {max_bytes} bytes (at {rel}); "
                    "nothing was saved. Exclude what need not travel, or raise max_bytes=")
            entries.append(Entry(rel, FILE, mode, info.st_size, file_sha256(path)))
        else:
            raise errors.WorkspaceError(
                f"{path} is not a file, a directory or a link; it cannot be saved")
    return Tree(tuple(entries))


def _walk(top: Path) -> Iterator[Path]:
    """Every path under `top`, sorted, without following links."""
    for name in sorted(os.listdir(top)):
        path = top / name
        yield path
        if path.is_dir() and not path.is_symlink():
            yield from _walk(path)


def _link_target(top: Path, link: Path) -> str:
    """The link's target relative to the link's folder, if it stays in `top`."""
    raw = os.readlink(link)
    resolved = Path(os.path.normpath(link.parent / raw))
    if not inside(resolved, top) or not inside(resolved.resolve(), top):
        raise errors.WorkspaceEscape(
            f"{link} points outside the workspace ({raw}); nothing was saved. Make the "
            "link relative to a path inside it, or remove it")
    return os.path.relpath(resolved, link.parent)


def read_blob(top: Path, rel: str, sha256: str) -> bytes:
    """The content of `rel`, checked against the hash the scan found."""
    data = (top / rel).read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise errors.WorkspaceChanged(
            f"{top / rel} changed while the workspace was being saved; nothing was saved")
    return data


def write(tree: Tree, dest: Path, blob: Callable[[str], bytes]) -> Path:
    """Write `tree` into `dest`, which must not exist: first into a sibling
    folder, renamed to `dest` once written and checked against the tree's
    hash, so a failure leaves nothing half-written. Returns `dest`."""
    if dest.exists():
        raise errors.WorkspaceError(f"{dest} exists already; restore into a new directory")
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.partial")
    scratch.mkdir()
    try:
        dirs: list[Entry] = []
        for e in tree.entries:
            path = scratch / e.path
            if e.kind == DIR:
                path.mkdir()
                dirs.append(e)
            elif e.kind == LINK:
                path.symlink_to(e.target)
            else:
                data = blob(e.sha256)
                if hashlib.sha256(data).hexdigest() != e.sha256:
                    raise errors.WorkspaceMismatch(
                        f"the stored content of {e.path} does not hash to {e.sha256}",
                        [f"{e.path}: stored content differs"])
                path.write_bytes(data)
                path.chmod(e.mode)
        for e in reversed(dirs):  # a read-only folder is closed once its content is in
            (scratch / e.path).chmod(e.mode)
        found = scan(scratch)
        if found.sha256 != tree.sha256:
            raise errors.WorkspaceMismatch(
                f"the restored tree hashes to {found.sha256}, not {tree.sha256}",
                diff(tree, found))
        scratch.rename(dest)
    except BaseException:
        remove(scratch)
        raise
    return dest


def remove(path: Path) -> None:
    """Delete a folder this module wrote, read-only subfolders included."""
    for folder, _dirs, _files in os.walk(path):  # a read-only folder cannot be emptied
        with contextlib.suppress(OSError):
            os.chmod(folder, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def diff(expected: Tree, found: Tree, limit: int = 20) -> list[str]:
    """What differs between two trees, one line a path (at most `limit`)."""
    a = {e.path: e for e in expected.entries}
    b = {e.path: e for e in found.entries}
    lines = []
    for path in sorted(a.keys() | b.keys()):
        if path not in b:
            lines.append(f"{path}: missing")
        elif path not in a:
            lines.append(f"{path}: not in the snapshot")
        elif a[path] != b[path]:
            x, y = a[path], b[path]
            what = ("content" if x.sha256 != y.sha256 else
                    "mode" if x.mode != y.mode else "kind or target")
            lines.append(f"{path}: {what} differs")
    return lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])
