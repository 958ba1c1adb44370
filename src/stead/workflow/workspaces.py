"""Workspaces: a directory that travels with its run.

`ws = await run.workspace("repo", path)` attaches a directory (inside the
allowed root) to the run; `await ws.save()` snapshots it durably: its tree
(`stead.files.trees`: every file by its sha256, links and modes; a git repository's
`.git` with it, so no remote is needed to restore it), and for a git tree the
commit, the uncommitted patch and the untracked files (`stead.files.gittrees`).
The blobs nobody stored yet go to the run's database, or to an fsspec URL
(`blobs=`, `stead.files.blobs`), and the snapshot is written with its journal
record in one fenced transaction: a stale worker's save raises `StaleLease`
and stores nothing. Each `run.step` that changes an attached workspace is
saved that way too, in its own result's transaction (`StepSaves`): no result
is acknowledged ahead of the files it made.

A takeover restores each workspace's latest snapshot before replay
(`restore_all`, called by `stead.takeover`), into a fresh directory on the
new worker (`$STEAD_WORKSPACE_DIR`, else `.stead-workspaces` in its current
directory), never the old machine's path, and checks it against the
snapshot's hash; the workflow's `run.workspace(...)` then answers with that
directory. Until a workspace's first save there is nothing to restore: a
takeover attaches the path the workflow names, on the new worker.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stead import addresses, codec, errors
from stead.files import blobs, gittrees, trees
from stead.records import Record, RecordKind, RecordStatus, ResumeRecord, SnapshotRow
from stead.replay import Journal
from stead.store.base import Store
from stead.store.urls import display_url

if TYPE_CHECKING:
    # For the annotations alone: a client reading runs need not load what executes them.
    from stead.execution import Execution
    from stead.store.transactions.spend import Settlement

ROOT_ENV = "STEAD_WORKSPACE_ROOT"
DIR_ENV = "STEAD_WORKSPACE_DIR"
_SAVE = "save"  # the digest of a save record: what the tree holds is not an argument
# About how many bytes of blobs a restore reads from the database per round trip.
_BATCH_BYTES = 16 * 1024 * 1024


def allowed_root(root: str | os.PathLike[str] | None) -> Path:
    """Where attached directories must lie: `root`, `$STEAD_WORKSPACE_ROOT`,
    else the current directory."""
    return Path(root if root is not None else os.environ.get(ROOT_ENV) or os.getcwd())


def restore_base() -> Path:
    """Where a takeover restores workspaces on this worker."""
    return Path(os.environ.get(DIR_ENV) or Path(os.getcwd(), ".stead-workspaces"))


def _restores_inside(top: Path) -> Path | None:
    """The restore base, if it lies in `top` (a workspace attached as `.`):
    the copies takeovers put there are no part of the workspace, and a save
    leaves them out."""
    base = restore_base().resolve()
    return base if top in base.parents else None


class WorkspacePath(os.PathLike[str]):
    """Where a workspace (or a path in it) is on this worker: a path-like
    object (`open`, `Path(...)`, `os.fspath` and `str` give the real path),
    which a step's arguments digest as the workspace's name and the relative
    path. So a step given `ws.path` (or `ws.path / "calc.py"`) replays on a
    worker that restored the workspace elsewhere; a string made of it would
    not."""

    __slots__ = ("_top", "name", "rel")

    def __init__(self, name: str, top: Path, rel: str = "") -> None:
        self.name, self._top, self.rel = name, top, rel

    def __fspath__(self) -> str:
        return str(self._top / self.rel) if self.rel else str(self._top)

    def __str__(self) -> str:
        return self.__fspath__()

    def __repr__(self) -> str:
        return f"WorkspacePath({self.name!r}, {self.__fspath__()!r})"

    def __truediv__(self, other: str) -> WorkspacePath:
        rel = Path(self.rel, other).as_posix() if self.rel else Path(other).as_posix()
        return WorkspacePath(self.name, self._top, rel)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, os.PathLike) and os.fspath(other) == self.__fspath__()

    def __hash__(self) -> int:
        return hash(self.__fspath__())

    def __stead_redacted__(self) -> dict[str, str]:
        # How codec stores and digests it: the same on every worker.
        return {"workspace": self.name, "path": self.rel}


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """A saved state of a workspace: the journal `seq` of its save, the tree's
    sha256, its files and bytes, and for a git tree the commit, whether it
    had uncommitted changes, and its untracked files."""

    name: str
    seq: int
    tree: str
    files: int
    bytes: int
    commit: str | None = None
    dirty: bool = False
    untracked: tuple[str, ...] = ()

    @classmethod
    def from_record(cls, name: str, rec: Record) -> Snapshot:
        data = codec.loads(rec.payload)
        git = data.get("git") or {}
        return cls(name, rec.seq, str(data["tree"]), int(data["files"]), int(data["bytes"]),
                   git.get("commit"), bool(git.get("dirty", False)),
                   tuple(git.get("untracked", ())))


class Workspace:
    """A directory attached to a run (see the module). `path` is where it is
    on this worker (a `WorkspacePath`): the directory attached, or the one a
    takeover restored it into. Hand `ws.path` to steps, not a string made of
    it: see `WorkspacePath`."""

    def __init__(self, x: Execution, name: str, path: Path, *, max_bytes: int | None,
                 blob_url: str | None) -> None:
        self._x = x
        self.name = name
        self.dir = path
        self.path = WorkspacePath(name, path)
        self.max_bytes = max_bytes
        self.blob_url = blob_url
        self._snapshot: Snapshot | None = None
        # The tree hash last known to be in the directory (its last snapshot's,
        # or the tree attached): a step that leaves another is saved with it.
        self.seen: str | None = None

    @property
    def snapshot(self) -> Snapshot | None:
        """The last snapshot saved at this point of the workflow (None before
        the first save): the same live and on replay."""
        return self._snapshot

    def __repr__(self) -> str:
        return f"Workspace({self.name!r}, {str(self.dir)!r})"

    async def save(self) -> Snapshot:
        """Snapshot the directory durably (journaled: a replay returns the
        recorded snapshot and reads nothing). Raises `WorkspaceTooLarge`,
        `WorkspaceEscape` or `WorkspaceChanged` having stored nothing, and
        `StaleLease` if this worker no longer holds the run."""
        x = self._x
        addr = addresses.reserve()
        prior = x.take(addr, RecordKind.WORKSPACE, self.name, _SAVE)
        if prior:
            self._replayed(prior[-1])
            assert self._snapshot is not None
            return self._snapshot
        x.check_live()
        with x.busy():
            scanned = await self._scanned()
        last = self._snapshot
        if last is not None and scanned.sha256 == last.tree:
            # Saved already (a step's result carried it): the record says so,
            # and a takeover restores the snapshot that holds it.
            rec = x.record(addr, 1, RecordKind.WORKSPACE, self.name, _SAVE, RecordStatus.OK,
                           scanned.payload(self.name))
            await x.commit([rec])
            return last
        await _commit(x, [], [(self, addr, scanned)], None)
        assert self._snapshot is not None
        return self._snapshot

    async def _scanned(self) -> _Scanned:
        """The tree now, its blobs uploaded if they go to a URL (off the loop)."""
        scanned = await asyncio.to_thread(lambda: _Scanned.of(*self._scan()))
        if self.blob_url is not None:
            await asyncio.to_thread(self._upload, scanned)
        return scanned

    def _replayed(self, rec: Record) -> None:
        self._snapshot = Snapshot.from_record(self.name, rec)
        self.seen = self._snapshot.tree

    def _scan(self) -> tuple[trees.Tree, gittrees.GitState | None]:
        # git first, so the tree scanned is the one it described (it writes nothing).
        git = gittrees.state(self.dir)
        return trees.scan(self.dir, self.max_bytes, _restores_inside(self.dir)), git

    def _upload(self, scanned: _Scanned) -> None:
        assert self.blob_url is not None
        where = blobs.BlobDir(self.blob_url)
        located, extra = scanned.located, scanned.extra
        for sha256 in where.missing([*located, *extra]):
            data = extra.get(sha256) or trees.read_blob(self.dir, located[sha256], sha256)
            where.put(sha256, data)


@dataclasses.dataclass(frozen=True, slots=True)
class _Scanned:
    """A workspace's tree as scanned, ready to be stored: what costs time in
    a large tree (its manifest, hash, blob index) worked out once, in the
    scanning thread, so the event loop never walks the entries."""

    tree: trees.Tree
    git: gittrees.GitState | None
    manifest: str
    sha256: str
    located: dict[str, str]  # each blob's hash, and one path holding it
    files: int
    size: int  # bytes of files

    @classmethod
    def of(cls, tree: trees.Tree, git: gittrees.GitState | None) -> _Scanned:
        manifest = tree.manifest
        return cls(tree, git, manifest, trees.digest(manifest), tree.blobs(), tree.files,
                   tree.bytes)

    @property
    def extra(self) -> dict[str, bytes]:
        git = self.git
        return {git.patch_sha256: git.patch} if git is not None and git.patch else {}

    def payload(self, name: str) -> str:
        git = self.git
        return codec.dumps({"tree": self.sha256, "files": self.files, "bytes": self.size,
                            "git": None if git is None else git.to_json()},
                           what=f"the snapshot of workspace {name!r}")


async def _commit(x: Execution, recs: list[Record],
                  saves: list[tuple[Workspace, str, _Scanned]], drop: Record | None) -> None:
    """Journal `recs` and, in the same fenced transaction, a snapshot of each
    workspace in `saves` (its save record at the address given): a takeover
    finds a result and the files it made, or neither."""
    saved = [x.record(addr, 1, RecordKind.WORKSPACE, ws.name, _SAVE, RecordStatus.OK,
                      scanned.payload(ws.name)) for ws, addr, scanned in saves]
    into_db = [(ws, s) for ws, _a, s in saves if ws.blob_url is None]

    def index() -> tuple[dict[str, tuple[Workspace, _Scanned]], list[str]]:
        found = {h: (ws, s) for ws, s in into_db for h in (*s.located, *s.extra)}
        return found, list(found)

    # Every blob's hash and where to read it: whole-tree work, off the loop.
    where, hashes = await asyncio.to_thread(index) if into_db else ({}, [])
    numbered: list[Record] = []

    def read(sha256: str) -> bytes:
        ws, scanned = where[sha256]
        if sha256 in scanned.extra:
            return scanned.extra[sha256]
        return trees.read_blob(ws.dir, scanned.located[sha256], sha256)

    def send(batch: list[Record], resume: ResumeRecord | None) -> Any:
        numbered[:] = batch[len(batch) - len(saved):]
        rows = [SnapshotRow(
            run_id=x.fence.run_id, name=ws.name, seq=rec.seq, epoch=x.fence.epoch,
            worker_id=x.fence.worker_id, tree=s.sha256, manifest=s.manifest,
            git=None if s.git is None else json.dumps({**s.git.to_json()}),
            files=s.files, bytes=s.size, stored_bytes=0, blobs=ws.blob_url,
            source=str(ws.dir), at=rec.at) for (ws, _a, s), rec in zip(saves, batch[-len(saved):],
                                                                       strict=True)]
        return x.store.save_snapshot(x.fence, batch, resume, rows[-1], hashes, read,
                                     more=rows[:-1])

    await x.write([*recs, *saved], send, drop=drop)
    for (ws, _a, _s), rec in zip(saves, numbered, strict=True):
        ws._replayed(rec)


class StepSaves:
    """The snapshots that ride with each step's result: after a step, every
    attached workspace whose tree is not the one last known is saved in the
    same fenced transaction as the step's record (only the blobs the store
    lacks are stored). So no result is acknowledged ahead of the files it
    made: a takeover restores them, and the step is not redone. A save's
    record sits at the step's address with the workspace's name after it."""

    def __init__(self, x: Execution) -> None:
        self._x = x
        self.spaces: list[Workspace] = []

    def attached(self, ws: Workspace) -> None:
        self.spaces = [*(w for w in self.spaces if w.name != ws.name), ws]

    def replayed(self, addr: str) -> None:
        """A replayed step: the snapshots journaled with it are the last known."""
        for ws in self.spaces:
            prior = self._x.journal.take(f"{addr}/{ws.name}", RecordKind.WORKSPACE, ws.name,
                                         _SAVE)
            if prior:
                ws._replayed(prior[-1])

    async def commit(self, addr: str, rec: Record, started: Record,
                     outcome: Settlement | None = None) -> None:
        """Journal step record `rec` with a snapshot of each workspace it
        changed. (`outcome` is a model call's spend settlement: a step has none.)"""
        x = self._x
        saves = []
        with x.busy():
            for ws in self.spaces:
                scanned = await ws._scanned()
                if scanned.sha256 != ws.seen:
                    saves.append((ws, f"{addr}/{ws.name}", scanned))
        if not saves:
            await x.commit([rec], drop=started)
            return
        await _commit(x, [rec], saves, started)


_NAME_RULE = ("a workspace's name is a non-empty string of at most 255 characters, "
              "without '/' or NUL, that does not start with '.'")


def _good_name(name: object) -> bool:
    return (isinstance(name, str) and 0 < len(name) <= 255 and "/" not in name
            and "\0" not in name and not name.startswith("."))


def _checked_name(name: str) -> str:
    """A stored snapshot's workspace name, if `attach` would take it: it
    names the folder a takeover restores into, which must stay in the run's."""
    if not _good_name(name):
        raise errors.WorkspaceEscape(
            f"a stored snapshot names workspace {name[:80]!r}, which is no folder name: "
            f"{_NAME_RULE}")
    return name


def _run_folder(run_id: str) -> Path:
    """Where a takeover restores the run's workspaces: one folder of the base."""
    if not _good_name(run_id):
        raise errors.WorkspaceEscape(
            f"run id {run_id[:80]!r} is no folder name; its workspaces are not restored")
    return restore_base() / run_id


async def attach(x: Execution, name: str, path: str | os.PathLike[str], *,
                 root: str | os.PathLike[str] | None, max_bytes: int | None,
                 blob_url: str | None) -> Workspace:
    """`run.workspace`: see the module."""
    if not _good_name(name):
        raise ValueError(_NAME_RULE)
    if max_bytes is not None and (isinstance(max_bytes, bool) or max_bytes < 0):
        raise ValueError("max_bytes is a number of bytes >= 0, or None for no limit")
    addr = addresses.reserve()
    digest = codec.digest(name, max_bytes, blob_url)
    prior = x.take(addr, RecordKind.WORKSPACE, name, digest)
    restored = x.restored.get(name)
    if restored:
        top = Path(restored["path"])
    elif prior and x.dry:
        # A dry replay (replay-check) reads no files: the machine it runs on
        # need not have the directory the run attached.
        top = Path(str(codec.loads(prior[-1].payload)["attached"]))
    else:
        top = trees.checked_dir(path, allowed_root(root))
    if not prior:
        x.check_live()
        x.buffer(x.record(addr, 1, RecordKind.WORKSPACE, name, digest, RecordStatus.OK,
                          codec.dumps({"attached": str(top)}, what="a workspace")))
    ws = Workspace(x, name, top, max_bytes=max_bytes, blob_url=blob_url)
    if restored:
        ws.seen = str(restored["tree"])
    elif not x.dry:
        ws.seen = await asyncio.to_thread(lambda: ws._scan()[0].sha256)
    return ws


# -- restoring ---------------------------------------------------------------------------
def _still_replayed(journal: Journal, seq: int) -> bool:
    found = journal.tail(seq)
    return bool(found) and found[0].seq == seq


async def restore_all(store: Store, run_id: str, epoch: int, journal: Journal
                      ) -> dict[str, dict[str, Any]]:
    """Restore the latest snapshot of each of the run's workspaces (still in
    the replayed journal) into fresh directories; what the resume record
    lists, by name. Raises `WorkspaceError` (a `WorkspaceMismatch` saying
    what differs) if one cannot be restored as saved."""
    latest: dict[str, SnapshotRow] = {}
    for snap in await store.list_snapshots(run_id):
        if _still_replayed(journal, snap.seq):
            latest[_checked_name(snap.name)] = snap
    done: dict[str, dict[str, Any]] = {}
    if not latest:
        return done
    folder = _run_folder(run_id)
    _forget_earlier(folder, epoch)
    for name, snap in sorted(latest.items()):
        dest = folder / f"{name}.{epoch}.{uuid.uuid4().hex[:8]}"
        await restore(store, snap, dest)
        done[name] = {"path": str(dest), "seq": snap.seq, "tree": snap.tree,
                      "files": snap.files, "bytes": snap.bytes, "saved_epoch": snap.epoch,
                      "saved_by": snap.worker_id, "source": snap.source}
    return done


def _forget_earlier(folder: Path, epoch: int) -> None:
    """Remove what earlier claims of the run restored on this machine: the
    run is this claim's now, and those copies are no one's."""
    if not folder.is_dir():
        return
    for old in folder.iterdir():
        parts = old.name.split(".")
        if len(parts) >= 3 and parts[-2].isdigit() and int(parts[-2]) < epoch:
            trees.remove(old)


async def restore(store: Store, snap: SnapshotRow, dest: Path) -> Path:
    """Write `snap` into `dest` (which must not exist), checked against its
    hash and, for a git tree, its commit. Whatever the row holds, nothing is
    created or changed outside `dest`: its manifest is checked whole before
    anything is written (`trees.Tree.loads`), and `trees.write` writes nothing
    through a link."""
    what = f"workspace {snap.name!r} (snapshot at seq {snap.seq} of run {snap.run_id})"
    # Reading and checking the manifest is whole-tree work: off the loop.
    tree, commit = await asyncio.to_thread(_read_snapshot, snap, what)
    get = await asyncio.to_thread(_blob_source, store, snap, tree, asyncio.get_running_loop())
    try:
        await asyncio.to_thread(trees.write, tree, dest, get)
    except errors.WorkspaceMismatch as exc:
        raise errors.WorkspaceMismatch(
            f"{what} does not restore as saved: {exc}; differs: "
            + "; ".join(exc.differences), exc.differences) from exc
    except errors.WorkspaceError as exc:
        raise type(exc)(f"{what} could not be restored into {dest}{_from(snap)}: {exc}") from exc
    except OSError as exc:
        raise errors.WorkspaceError(
            f"{what} could not be restored into {dest}{_from(snap)}: {exc}") from exc
    if commit is not None:
        head = await asyncio.to_thread(gittrees.head, dest)
        if head is not None and head != commit:
            raise errors.WorkspaceMismatch(
                f"{what} restored on commit {head}, not the recorded {commit}",
                [f"HEAD: {head} (recorded {commit})"])
    return dest


def _read_snapshot(snap: SnapshotRow, what: str) -> tuple[trees.Tree, str | None]:
    """The tree a snapshot row holds, checked whole and against its hash, and
    the commit it records."""
    try:
        tree = trees.Tree.loads(snap.manifest)
        commit = _recorded_commit(snap.git)
    except errors.WorkspaceError as exc:
        raise type(exc)(
            f"{what} is refused, nothing was written: {exc}. The stored snapshot is not one "
            f"a save makes; look at it with `stead runs show {snap.run_id}`") from None
    if tree.sha256 != snap.tree:
        raise errors.WorkspaceMismatch(
            f"{what}: its manifest hashes to {tree.sha256}, not the recorded {snap.tree}",
            ["manifest: differs from the recorded hash"])
    return tree, commit


def _recorded_commit(git: str | None) -> str | None:
    """The commit a snapshot row's git JSON records, if any."""
    if git is None:
        return None
    try:
        found = json.loads(git)
    except (ValueError, RecursionError):
        found = None
    commit = found.get("commit") if isinstance(found, dict) else None
    if not isinstance(found, dict) or not (commit is None or isinstance(commit, str)):
        raise errors.WorkspaceUnsafe("its git state is not the JSON a save records")
    return commit


def _from(snap: SnapshotRow) -> str:
    """Where a snapshot's blobs are read from, for an error: a blob store's
    URL (its password masked), since the library that failed to reach it
    may not name it; nothing for blobs kept in the database."""
    return "" if snap.blobs is None else f" from {display_url(snap.blobs)}"


def _blob_source(store: Store, snap: SnapshotRow, tree: trees.Tree,
                 loop: asyncio.AbstractEventLoop) -> Callable[[str], bytes]:
    """What `trees.write` reads blobs with (from its thread; made in a
    thread too: it walks the tree). From the database they are fetched on
    `loop` in file order, a batch of about `_BATCH_BYTES` at a time, and
    dropped once every file holding them is written: a restore holds a batch
    in memory, not the tree."""
    if snap.blobs is not None:
        return blobs.BlobDir(snap.blobs).get
    files = [e for e in tree.entries if e.kind == trees.FILE]
    uses = collections.Counter(e.sha256 for e in files)
    sizes = {e.sha256: e.size for e in files}
    pending = list(uses)  # each blob once, in the order the files are written
    cache: dict[str, bytes] = {}

    def fetch() -> None:
        batch: list[str] = []
        size = 0
        while pending and (not batch or size + sizes[pending[0]] <= _BATCH_BYTES):
            batch.append(pending.pop(0))
            size += sizes[batch[-1]]
        cache.update(asyncio.run_coroutine_threadsafe(store.read_blobs(batch), loop).result())

    def get(sha256: str) -> bytes:
        while sha256 not in cache and sha256 in pending:
            fetch()
        if sha256 not in cache:
            raise errors.WorkspaceMismatch(f"blob {sha256} is missing from the store",
                                           [f"blob {sha256}: missing"])
        uses[sha256] -= 1
        return cache[sha256] if uses[sha256] > 0 else cache.pop(sha256)

    return get


async def patch_of(store: Store, run_id: str, name: str, seq: int | None = None) -> bytes:
    """The uncommitted patch (`git diff --binary HEAD`) of workspace `name`'s
    latest snapshot (or the one saved at `seq`), checked against its sha256."""
    snap = await _snapshot_of(store, run_id, name, seq)
    found = json.loads(snap.git) if snap.git is not None else None
    sha256 = found.get("patch_sha256") if isinstance(found, dict) else None
    if not isinstance(sha256, str):
        raise errors.WorkspaceError(
            f"the snapshot of workspace {name!r} at seq {snap.seq} of run {run_id} holds no "
            "uncommitted patch (its tree is no git repository, or it had no change against "
            f"its commit); restore the tree with `stead workspace restore {run_id} {name} DIR`")
    if snap.blobs is not None:
        return await asyncio.to_thread(blobs.BlobDir(snap.blobs).get, sha256)
    data = (await store.read_blobs([sha256])).get(sha256)
    if data is None or await asyncio.to_thread(
            lambda: hashlib.sha256(data).hexdigest()) != sha256:
        raise errors.WorkspaceMismatch(
            f"the patch of workspace {name!r} at seq {snap.seq} of run {run_id} is missing "
            "from the store or does not hash as saved", [f"blob {sha256}: missing or changed"])
    return data


async def _snapshot_of(store: Store, run_id: str, name: str, seq: int | None) -> SnapshotRow:
    await store.get_run(run_id)
    snaps = [s for s in await store.list_snapshots(run_id)
             if s.name == name and (seq is None or s.seq == seq)]
    if not snaps:
        raise errors.WorkspaceError(
            f"run {run_id} has no snapshot of workspace {name!r}"
            + ("" if seq is None else f" at seq {seq}"))
    return snaps[-1]


async def restore_to(store: Store, run_id: str, name: str, dest: str | os.PathLike[str],
                     seq: int | None = None) -> SnapshotRow:
    """Restore the latest snapshot of workspace `name` (or the one saved at
    `seq`) into `dest`, a directory that must not exist yet: for a person."""
    snap = await _snapshot_of(store, run_id, name, seq)
    await restore(store, snap, Path(dest).absolute())
    return snap
