"""A directory as a content-addressed tree: its manifest (every file,
directory and symbolic link, with its mode, size and sha256), the tree's hash,
and writing a manifest back into a fresh directory.

It knows no run and no store: `stead.workflow.workspaces` saves a scanned tree's blobs
and restores them. The rules that keep a tree portable are checked while
scanning, before anything is stored: the directory lies inside the allowed
root, no chain of symbolic links leads out of it (`stead.files.links`), and its
files add up to no more than the limit. A stored manifest is read as hostile
input: every entry and every link is checked before a restore writes
anything, and the restore itself writes nothing through a link.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from stead import errors
from stead.files import links

FILE, DIR, LINK = "file", "dir", "link"
_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One path of the tree (POSIX, relative to its top). A file has its
    sha256 and size; a link its target, exactly as the link's text."""

    path: str
    kind: str
    mode: int
    size: int = 0
    sha256: str = ""
    target: str = ""

    def to_json(self) -> list[object]:
        return [self.path, self.kind, self.mode, self.size, self.sha256 or self.target]

    @classmethod
    def from_json(cls, row: object) -> Entry:
        """An entry read back from a stored manifest, whatever it holds:
        `WorkspaceEscape` for a path leading out of the tree, `WorkspaceUnsafe`
        for anything no scan could have produced."""
        if not isinstance(row, list) or len(row) != 5:
            raise errors.WorkspaceUnsafe(
                f"manifest entry {_shown(row)} is not [path, kind, mode, size, ref]")
        path, kind, mode, size, ref = row
        where = _checked_path(path)
        if kind not in (FILE, DIR, LINK):
            raise errors.WorkspaceUnsafe(f"entry {where!r} has an unknown kind {_shown(kind)}")
        if not _number(mode, 0o7777) or not _number(size, _MAX_SIZE):
            raise errors.WorkspaceUnsafe(
                f"entry {where!r} has a mode {_shown(mode)} or size {_shown(size)} "
                "no file system holds")
        if mode & _SET_ID:
            raise errors.WorkspaceUnsafe(
                f"entry {where!r} has a setuid or setgid mode ({mode:o}), which no save records")
        if kind == FILE:
            if not isinstance(ref, str) or not _SHA256.fullmatch(ref):
                raise errors.WorkspaceUnsafe(f"file {where!r} has no sha256 ({_shown(ref)})")
            return cls(where, FILE, mode, size, sha256=ref)
        if kind == DIR:
            if size or ref != "":
                raise errors.WorkspaceUnsafe(f"folder {where!r} has a size or a reference")
            return cls(where, DIR, mode)
        if mode or size or not isinstance(ref, str) or not 0 < len(ref) <= _MAX_PATH:
            raise errors.WorkspaceUnsafe(
                f"link {where!r} has a mode, a size, or a target {_shown(ref)} that is not "
                f"text of 1 to {_MAX_PATH} characters")
        if "\0" in ref:
            raise errors.WorkspaceUnsafe(f"link {where!r} has a NUL in its target")
        if ref.startswith("/"):
            raise errors.WorkspaceEscape(f"link {where!r} leads to an absolute path")
        return cls(where, LINK, 0, target=ref)


_SHA256 = re.compile(r"[0-9a-f]{64}")
_MAX_PATH = 4096  # PATH_MAX, the longest path (or link text) the kernel takes
_MAX_NAME = 255  # NAME_MAX, in bytes
_MAX_SIZE = 1 << 63
# A save records no setuid or setgid bit, and a restore makes none: a restore
# run as root would otherwise make a program that runs as root for anyone.
_SET_ID = stat.S_ISUID | stat.S_ISGID


def _shown(value: object) -> str:
    """A value read from a stored manifest, quoted and cut for a message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _number(value: object, most: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= most


def _checked_path(path: object) -> str:
    """`path` if it is a normalised relative POSIX path (as a scan writes)."""
    if not isinstance(path, str) or not 0 < len(path) <= _MAX_PATH:
        raise errors.WorkspaceUnsafe(
            f"manifest path {_shown(path)} is not text of 1 to {_MAX_PATH} characters")
    if "\0" in path:
        raise errors.WorkspaceUnsafe(f"manifest path {_shown(path)} holds a NUL")
    names = path.split("/")
    if path.startswith("/") or ".." in names:
        raise errors.WorkspaceEscape(f"manifest path {_shown(path)} leads out of the tree")
    if any(n in ("", ".") or len(os.fsencode(n)) > _MAX_NAME for n in names):
        raise errors.WorkspaceUnsafe(f"manifest path {_shown(path)} is not a normalised path")
    return path


def check(entries: Sequence[Entry]) -> None:
    """The rules a tree obeys whatever wrote it: each path once, each entry
    in a folder of the tree (never below a link or a file), and each link
    leading, through the tree's other links, to a place inside it."""
    kinds: dict[str, str] = {}
    for e in entries:
        if e.path in kinds:
            raise errors.WorkspaceUnsafe(f"the manifest names {e.path!r} twice")
        kinds[e.path] = e.kind
    for e in entries:
        parent = e.path.rpartition("/")[0]
        if parent and kinds.get(parent) != DIR:
            what = f"a {kinds[parent]}" if parent in kinds else "not in the tree"
            raise errors.WorkspaceUnsafe(
                f"{e.path!r} lies below {parent!r}, which is {what}, not a folder")
    links.check_all({e.path: e.target for e in entries if e.kind == LINK})


# Entries per `json.dumps` call in a manifest. One call holds the GIL until
# it returns (about 1 ms per 1,000 entries), so a thread encoding a large
# tree lets the event loop run between slices, not after the whole tree.
_ENCODED_AT_ONCE = 1000


def digest(manifest: str) -> str:
    """The tree hash of a manifest (`Tree.manifest`)."""
    return hashlib.sha256(manifest.encode()).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class Tree:
    entries: tuple[Entry, ...]

    @property
    def manifest(self) -> str:
        """The entries as canonical JSON text: what the tree hash covers. The
        same text as one `json.dumps` of them, made a slice at a time."""
        rows = [e.to_json() for e in self.entries]
        return "[" + ",".join(
            json.dumps(rows[i:i + _ENCODED_AT_ONCE], separators=(",", ":"))[1:-1]
            for i in range(0, len(rows), _ENCODED_AT_ONCE)) + "]"

    @property
    def sha256(self) -> str:
        """The tree hash. It encodes the whole manifest: in a large tree, off
        the event loop."""
        return digest(self.manifest)

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
        """The tree a stored manifest holds, checked entry by entry and as a
        whole (`check`) before anything is written from it."""
        try:
            rows = json.loads(manifest)
        except (ValueError, RecursionError) as exc:
            raise errors.WorkspaceUnsafe(f"the manifest is not JSON ({exc})") from None
        if not isinstance(rows, list):
            raise errors.WorkspaceUnsafe("the manifest is not a list of entries")
        tree = cls(tuple(Entry.from_json(row) for row in rows))
        check(tree.entries)
        return tree


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


def scan(top: Path, max_bytes: int | None = None, skip: Path | None = None) -> Tree:
    """The tree of `top` (a resolved directory), links kept as their text,
    without the folder `skip` (if it is in it).
    Raises `WorkspaceEscape` for a chain of links leading out of it (or to an
    absolute path), `WorkspaceUnsafe` for a link loop, `WorkspaceTooLarge`
    past `max_bytes`."""
    entries: list[Entry] = []
    total = 0
    for path in _walk(top, skip):
        rel = path.relative_to(top).as_posix()
        info = path.lstat()
        mode = stat.S_IMODE(info.st_mode) & ~_SET_ID
        if stat.S_ISLNK(info.st_mode):
            entries.append(Entry(rel, LINK, 0, target=os.readlink(path)))
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
    try:
        check(entries)
    except errors.WorkspaceError as exc:
        raise type(exc)(
            f"{top}: {exc}; nothing was saved. Make each link relative to a path inside the "
            "workspace, or remove it") from None
    return Tree(tuple(entries))


def _walk(top: Path, skip: Path | None = None) -> Iterator[Path]:
    """Every path under `top`, sorted, without following links; `skip` and
    what it holds left out."""
    for name in sorted(os.listdir(top)):
        path = top / name
        if path == skip:
            continue
        yield path
        if path.is_dir() and not path.is_symlink():
            yield from _walk(path, skip)


def read_blob(top: Path, rel: str, sha256: str) -> bytes:
    """The content of `rel`, checked against the hash the scan found."""
    data = (top / rel).read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise errors.WorkspaceChanged(
            f"{top / rel} changed while the workspace was being saved; nothing was saved")
    return data


def write(tree: Tree, dest: Path, blob: Callable[[str], bytes]) -> Path:
    """Write `tree` (checked: see `check`) into `dest`, which must not exist:
    first into a sibling folder, renamed to `dest` once written and checked
    against the tree's hash, so a failure leaves nothing half-written. Folders
    come first, then files, then links, each made in its folder reached from
    the top one name at a time without following a link (`_folder`): nothing
    is written through a link, not even one put there meanwhile. Returns
    `dest`."""
    if os.path.lexists(dest):
        raise errors.WorkspaceError(f"{dest} exists already; restore into a new directory")
    check(tree.entries)  # whoever built the tree: writing it must be safe
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.partial")
    scratch.mkdir()
    try:
        top = os.open(scratch, _OPEN_DIR)
        try:
            _write_entries(top, tree, blob)
        finally:
            os.close(top)
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


_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_EXCL and O_NOFOLLOW: a name that appeared meanwhile (a link) is refused.
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _write_entries(top: int, tree: Tree, blob: Callable[[str], bytes]) -> None:
    dirs = sorted((e for e in tree.entries if e.kind == DIR), key=lambda e: e.path.count("/"))
    for e in dirs:
        with _folder(top, e.path) as (at, name):
            os.mkdir(name, 0o700, dir_fd=at)
    for e in tree.entries:
        if e.kind == FILE:
            data = blob(e.sha256)
            if hashlib.sha256(data).hexdigest() != e.sha256:
                raise errors.WorkspaceMismatch(
                    f"the stored content of {e.path!r} does not hash to {e.sha256}",
                    [f"{e.path}: stored content differs"])
            with _folder(top, e.path) as (at, name), \
                    os.fdopen(os.open(name, _CREATE, 0o600, dir_fd=at), "wb") as f:
                f.write(data)
                os.fchmod(f.fileno(), e.mode)
        elif e.kind == LINK:
            with _folder(top, e.path) as (at, name):
                os.symlink(e.target, name, dir_fd=at)
    for e in reversed(dirs):  # a read-only folder is closed once its content is in
        with _folder(top, f"{e.path}/.") as (at, _name):
            os.fchmod(at, e.mode)


@contextlib.contextmanager
def _folder(top: int, rel: str) -> Iterator[tuple[int, str]]:
    """The open folder `rel` lies in, and its last name. The folder is
    reached from `top` one name at a time with O_NOFOLLOW, so the kernel
    refuses a link standing where the restore made a folder."""
    *names, last = rel.split("/")
    at = os.dup(top)
    try:
        for name in names:
            try:
                found = os.open(name, _OPEN_DIR, dir_fd=at)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise errors.WorkspaceEscape(
                    f"a link stands where the restore made the folder of {rel!r}; "
                    "nothing is written through it") from None
            os.close(at)
            at = found
        yield at, last
    finally:
        os.close(at)


def remove(path: Path) -> None:
    """Delete a folder this module wrote, read-only subfolders included. A
    link there is removed itself: nothing it points to is changed."""
    if path.is_symlink():
        path.unlink()
        return
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
