"""A workspace restore treats what a snapshot row holds as hostile: whatever
its manifest says, nothing outside the destination is created or changed
(each restore here runs inside a sentinel folder whose tree is compared
before and after), the refusal is typed, and it comes before anything is
written. A save resolves chains of links, not their text, and keeps each
link's text exactly. Through `trees`, `stead workspace restore` and a
takeover, on both stores."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import stead
from stead.files import links, trees
from stead.records import (
    Fence,
    NewRun,
    Record,
    RecordKind,
    RecordStatus,
    RunStatus,
    SnapshotRow,
)
from stead.workflow import workspaces
from tests import stress

CONTENT = b"written by a hostile manifest\n"
SHA = hashlib.sha256(CONTENT).hexdigest()


def chain(ups: int) -> list[list[Any]]:
    """The issue's chain: `a` is the top, so `a/b` is `b`, a link to the top's
    parent, so `a/b/c` is a link made in that parent, to the next one up, and
    so on: `x` lands `ups` folders above the tree written through the links."""
    rows: list[list[Any]] = [["a", "link", 0, 0, "."]]
    path = "a"
    for name in "bcdefg"[:ups]:
        path += f"/{name}"
        rows.append([path, "link", 0, 0, ".."])
    return [*rows, [f"{path}/x", "file", 420, len(CONTENT), SHA]]


CHAIN = chain(2)


def state(top: Path, skip: Path) -> dict[str, tuple[int, int, str | bytes | None]]:
    """Every path under `top` but `skip` (links not followed): its kind, mode
    and content or link text."""
    found: dict[str, tuple[int, int, str | bytes | None]] = {}
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if Path(folder, d) != skip]
        for name in [*dirs, *files]:
            path = Path(folder, name)
            if path == skip:
                continue
            info = path.lstat()
            what: str | bytes | None = None
            if stat.S_ISLNK(info.st_mode):
                what = os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                what = path.read_bytes()
            found[str(path.relative_to(top))] = (stat.S_IFMT(info.st_mode),
                                                 stat.S_IMODE(info.st_mode), what)
    return found


def sentinel(base: Path) -> tuple[Path, Path]:
    """A sentinel folder holding a file, a folder and the restore's parent;
    returns the sentinel and the destination (three levels down)."""
    base.mkdir(parents=True, exist_ok=True)
    (base / "keep.txt").write_text("untouched\n")
    (base / "other").mkdir()
    box = base / "box" / "inner"
    box.mkdir(parents=True)
    return base, box / "dest"


def blob(sha256: str) -> bytes:
    assert sha256 == SHA
    return CONTENT


def restore_rows(rows: list[Any], dest: Path) -> None:
    trees.write(trees.Tree.loads(json.dumps(rows)), dest, blob)


def assert_inside(dest: Path) -> None:
    """Every link a restore made resolves inside `dest`."""
    top = os.path.realpath(dest)
    for folder, dirs, files in os.walk(dest):
        for name in [*dirs, *files]:
            path = Path(folder, name)
            if path.is_symlink():
                real = os.path.realpath(path)
                assert real == top or real.startswith(top + os.sep), (path, real)


# -- a stored manifest, entry by entry ------------------------------------------------
@pytest.mark.parametrize(("row", "error"), [
    (["../evil", "file", 420, 1, SHA], stead.WorkspaceEscape),
    (["/etc/passwd", "file", 420, 1, SHA], stead.WorkspaceEscape),
    (["a/../../b", "dir", 493, 0, ""], stead.WorkspaceEscape),
    (["link", "link", 0, 0, "/etc/passwd"], stead.WorkspaceEscape),
    (["x", "socket", 0, 0, ""], stead.WorkspaceUnsafe),
    (["a\0b", "file", 420, 1, SHA], stead.WorkspaceUnsafe),
    (["link", "link", 0, 0, "a\0b"], stead.WorkspaceUnsafe),
    (["a//b", "file", 420, 1, SHA], stead.WorkspaceUnsafe),
    (["./a", "file", 420, 1, SHA], stead.WorkspaceUnsafe),
    (["", "dir", 493, 0, ""], stead.WorkspaceUnsafe),
    (["x" * 256, "file", 420, 1, SHA], stead.WorkspaceUnsafe),
    (["a", "file", -1, 1, SHA], stead.WorkspaceUnsafe),
    (["a", "file", True, 1, SHA], stead.WorkspaceUnsafe),
    (["a", "file", "420", 1, SHA], stead.WorkspaceUnsafe),
    (["a", "file", 0o17777, 1, SHA], stead.WorkspaceUnsafe),
    (["a", "file", 0o4755, 1, SHA], stead.WorkspaceUnsafe),
    (["a", "dir", 0o2775, 0, ""], stead.WorkspaceUnsafe),
    (["a", "file", 420, 1, "../../etc"], stead.WorkspaceUnsafe),
    (["a", "dir", 493, 5, ""], stead.WorkspaceUnsafe),
    (["link", "link", 0, 0, ""], stead.WorkspaceUnsafe),
    ([1, "file", 420, 1, SHA], stead.WorkspaceUnsafe),
    (["a", "file", 420], stead.WorkspaceUnsafe),
    ("a", stead.WorkspaceUnsafe),
])
def test_a_stored_entry_that_no_save_makes_is_refused_with_a_typed_error(
    row: Any, error: type[stead.WorkspaceError],
) -> None:
    with pytest.raises(error):
        trees.Entry.from_json(row)


@pytest.mark.parametrize(("rows", "error"), [
    (CHAIN, stead.WorkspaceUnsafe),  # below a link: a restore writes nothing through one
    ([["a", "link", 0, 0, "."], ["b", "link", 0, 0, "a/.."]], stead.WorkspaceEscape),
    ([["a", "dir", 493, 0, ""], ["a/up", "link", 0, 0, ".."],
      ["out", "link", 0, 0, "a/up/.."]], stead.WorkspaceEscape),
    ([["l", "link", 0, 0, "../outside"]], stead.WorkspaceEscape),
    ([["m", "link", 0, 0, "missing/../.."]], stead.WorkspaceEscape),
    ([["a", "link", 0, 0, "b"], ["b", "link", 0, 0, "a"]], stead.WorkspaceUnsafe),
    ([["self", "link", 0, 0, "self/x"]], stead.WorkspaceUnsafe),
    ([["a", "file", 420, 1, SHA], ["a", "file", 420, 1, SHA]], stead.WorkspaceUnsafe),
    ([["l", "link", 0, 0, "."], ["l/x", "file", 420, 1, SHA]], stead.WorkspaceUnsafe),
    ([["f", "file", 420, 1, SHA], ["f/x", "file", 420, 1, SHA]], stead.WorkspaceUnsafe),
    ([["nowhere/x", "file", 420, 1, SHA]], stead.WorkspaceUnsafe),
    ("[" * 100_000 + "]" * 100_000, stead.WorkspaceUnsafe),
    ({"not": "a list"}, stead.WorkspaceUnsafe),
])
def test_a_hostile_manifest_is_refused_before_anything_is_written(
    tmp_path: Path, rows: Any, error: type[stead.WorkspaceError],
) -> None:
    top, dest = sentinel(tmp_path)
    before = state(top, dest)
    manifest = rows if isinstance(rows, str) else json.dumps(rows)
    with pytest.raises(error):
        trees.Tree.loads(manifest)
    assert state(top, dest) == before and not dest.exists()


def test_a_manifest_asking_for_unbounded_link_work_is_refused() -> None:
    walk = "/".join(["x", ".."] * 600) + "/x"  # 1,201 steps, inside
    one = [["l0", "link", 0, 0, walk]]
    assert trees.Tree.loads(json.dumps(one)).entries[0].target == walk
    many = [[f"l{i}", "link", 0, 0, walk] for i in range(100)]
    with pytest.raises(stead.WorkspaceUnsafe, match="budget"):
        trees.Tree.loads(json.dumps(many))
    assert links.resolve({"a": "b/c", "b": "."}, "a") == ("c", 2)


def test_the_issues_chain_writes_nothing_outside_the_destination(tmp_path: Path) -> None:
    top, dest = sentinel(tmp_path)
    before = state(top, dest)
    with pytest.raises(stead.WorkspaceUnsafe, match="below 'a', which is a link"):
        restore_rows(CHAIN, dest)
    assert state(top, dest) == before
    assert not dest.exists()


def test_a_folder_swapped_for_a_link_during_the_restore_is_not_written_through(
    tmp_path: Path,
) -> None:
    top, dest = sentinel(tmp_path)
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "a.txt").write_bytes(CONTENT)
    (src / "d" / "f").write_bytes(CONTENT)
    tree = trees.scan(src)
    shutil.rmtree(src)
    before = state(top, dest)
    swapped: list[Path] = []

    def swapping_blob(sha256: str) -> bytes:
        # Someone else, between two writes, puts a link where the restore made `d`.
        if not swapped:
            [scratch] = dest.parent.glob(".dest.*.partial")
            (scratch / "d").rmdir()
            (scratch / "d").symlink_to(top / "other")
            swapped.append(scratch)
        return blob(sha256)

    with pytest.raises(stead.WorkspaceEscape, match="'d/f'"):
        trees.write(tree, dest, swapping_blob)
    assert state(top, dest) == before and not dest.exists()


names = st.sampled_from(["a", "b", "..data", "x"])
steps = st.sampled_from([".", "..", "a", "b", "..data", "x", ""])
targets = st.one_of(st.lists(steps, min_size=1, max_size=5).map("/".join),
                    st.sampled_from(["/", "/tmp", "/etc/passwd"]))
paths = st.lists(names, min_size=1, max_size=4).map("/".join)
rows = st.one_of(
    st.tuples(paths).map(lambda p: [p[0], "dir", 0o755, 0, ""]),
    st.tuples(paths).map(lambda p: [p[0], "file", 0o644, len(CONTENT), SHA]),
    st.tuples(paths, targets).map(lambda p: [p[0], "link", 0, 0, p[1]]),
)



def shaped(picked: list[list[Any]]) -> list[list[Any]]:
    """The picked rows with a folder row for each folder on their way (unless
    that path was picked as something else: then the row lies below a link or
    a file), first pick of a path kept, in the order a scan lists them: most
    restore as far as their links allow."""
    found: dict[str, list[Any]] = {}
    for row in picked:
        names = row[0].split("/")
        for depth in range(1, len(names)):
            found.setdefault("/".join(names[:depth]), ["/".join(names[:depth]), "dir",
                                                       0o755, 0, ""])
        found.setdefault(row[0], row)
    return sorted(found.values(), key=lambda row: row[0].split("/"))


manifests = st.one_of(st.lists(rows, max_size=10), st.lists(rows, max_size=8).map(shaped))


@settings(max_examples=stress.examples(300), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(manifest=manifests)
@example(manifest=CHAIN)
@example(manifest=[["a", "link", 0, 0, "."], ["a/b", "link", 0, 0, ".."],
                   ["a/b/x", "dir", 0o755, 0, ""], ["a/b/x/f", "file", 0o644,
                                                   len(CONTENT), SHA]])
def test_no_manifest_creates_or_changes_anything_outside_its_destination(
    tmp_path_factory: pytest.TempPathFactory, manifest: list[Any],
) -> None:
    top, dest = sentinel(tmp_path_factory.mktemp("sentinel"))
    before = state(top, dest)
    try:
        restore_rows(manifest, dest)
    except stead.WorkspaceError:
        assert not dest.exists()
    else:
        assert_inside(dest)
    assert state(top, dest) == before


# -- a save resolves link chains and keeps link text --------------------------------
def test_a_chain_of_links_leading_out_is_refused_on_save(tmp_path: Path) -> None:
    top = tmp_path / "ws"
    (top / "a").mkdir(parents=True)
    (top / "a" / "up").symlink_to("..")  # the top itself: fine alone
    assert [e.target for e in trees.scan(top).entries if e.kind == trees.LINK] == [".."]
    (top / "out").symlink_to("a/up/..")  # the top's parent, through a/up
    with pytest.raises(stead.WorkspaceEscape, match=r"'out'.*nothing was saved"):
        trees.scan(top)


def test_a_link_loop_is_a_workspace_error_on_save(tmp_path: Path) -> None:
    top = tmp_path / "ws"
    top.mkdir()
    (top / "a").symlink_to("b")
    (top / "b").symlink_to("a")
    with pytest.raises(stead.WorkspaceUnsafe, match="loop"):
        trees.scan(top)


def test_a_save_records_no_setuid_or_setgid_bit(tmp_path: Path) -> None:
    top = tmp_path / "ws"
    (top / "shared").mkdir(parents=True)
    (top / "shared").chmod(0o2775)  # a group folder: its files are the group's
    (top / "tool").write_bytes(CONTENT)
    (top / "tool").chmod(0o4755)
    tree = trees.scan(top)
    assert {e.path: e.mode for e in tree.entries} == {"shared": 0o775, "tool": 0o755}
    dest = trees.write(trees.Tree.loads(tree.manifest), tmp_path / "dest", blob)
    assert stat.S_IMODE((dest / "tool").stat().st_mode) == 0o755
    assert trees.scan(dest).sha256 == tree.sha256


def test_an_absolute_link_is_refused_on_save_even_into_the_workspace(tmp_path: Path) -> None:
    top = tmp_path / "ws"
    top.mkdir()
    (top / "calc.py").write_text("x\n")
    (top / "abs").symlink_to(top / "calc.py")  # another machine restores elsewhere
    with pytest.raises(stead.WorkspaceEscape, match="absolute"):
        trees.scan(top)


def test_the_kubernetes_layout_and_link_text_save_and_restore_exactly(tmp_path: Path) -> None:
    top = tmp_path / "ws"
    (top / "..2026_12_01").mkdir(parents=True)
    (top / "..2026_12_01" / "app.yaml").write_text("replicas: 3\n")
    (top / "..data").symlink_to("..2026_12_01")
    (top / "app.yaml").symlink_to("..data/app.yaml")
    (top / "pkg").mkdir()
    (top / "pkg" / "again").symlink_to("./../pkg/.././app.yaml")  # kept as written
    tree = trees.scan(top)
    texts = {e.path: e.target for e in tree.entries if e.kind == trees.LINK}
    assert texts == {"..data": "..2026_12_01", "app.yaml": "..data/app.yaml",
                     "pkg/again": "./../pkg/.././app.yaml"}
    located = tree.blobs()
    dest = trees.write(trees.Tree.loads(tree.manifest), tmp_path / "dest",
                       lambda h: (top / located[h]).read_bytes())
    assert {p: os.readlink(dest / p) for p in texts} == texts
    assert (dest / "app.yaml").read_text() == (dest / "pkg" / "again").read_text() == (
        "replicas: 3\n")
    assert trees.scan(dest).sha256 == tree.sha256


# -- through the store: `stead workspace restore` and a takeover --------------------
async def hostile_snapshot(store: stead.Store, run_id: str, worker: str, epoch: int,
                           rows: list[Any], name: str = "repo", blobs: str | None = None
                           ) -> None:
    """Store a snapshot row holding `rows`, as a worker holding the run could."""
    manifest = json.dumps(rows, separators=(",", ":"))  # as a save writes it
    tree = hashlib.sha256(manifest.encode()).hexdigest()
    payload = json.dumps({"tree": tree, "files": 1, "bytes": len(CONTENT), "git": None})
    rec = Record(0, "0", 1, RecordKind.WORKSPACE, name, "save", RecordStatus.OK, payload,
                 epoch, 0.0)
    snap = SnapshotRow(run_id, name, 0, epoch, worker, tree, manifest, None, 1,
                       len(CONTENT), 0, blobs, "/elsewhere", 0.0)
    await store.save_snapshot(Fence(run_id, epoch, worker), [rec], None, snap,
                              [SHA] if blobs is None else [], lambda h: CONTENT)


async def held_run(store: stead.Store, rows: list[Any], name: str = "repo",
                   blobs: str | None = None) -> tuple[stead.App, stead.Client, str]:
    """A run claimed by worker w1, which stored a snapshot of `rows` as `name`
    and then died: the app, a client and the run id."""
    app = stead.App("holder")

    @app.workflow()
    async def hold(run: stead.Run) -> str:
        ws = await run.workspace("repo", ".")
        return str(ws.path)

    client = stead.Client(store, app)
    info = await client.start(hold)
    [row] = await store.claim("w1", ["hold@1"], 30.0, 1)
    await hostile_snapshot(store, info.run_id, "w1", row.epoch, rows, name, blobs)
    return app, client, info.run_id


async def test_stead_workspace_restore_refuses_a_hostile_snapshot(
    store: stead.Store, db_url: str, tmp_path: Path,
) -> None:
    from click.testing import CliRunner

    from stead.cli import main

    _app, _client, run_id = await held_run(store, CHAIN)
    top, dest = sentinel(tmp_path / "sentinel")
    before = state(top, dest)
    done = await asyncio.to_thread(CliRunner().invoke, main, [
        "--db", db_url, "workspace", "restore", run_id, "repo", str(dest)])
    assert state(top, dest) == before and not dest.exists()
    assert done.exit_code == 1, done.output
    assert "refused, nothing was written" in done.output and "'a/b'" in done.output
    assert "Traceback" not in done.output


async def test_a_takeover_stops_the_run_on_a_hostile_snapshot_and_writes_nothing_outside(
    fstore: stead.Store, clock: stead.FakeClock, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Restored into DEST/RUN/repo.EPOCH.*: four folders up is inside the sentinel.
    app, client, run_id = await held_run(fstore, chain(4))
    top, dest = sentinel(tmp_path / "sentinel")
    monkeypatch.setenv("STEAD_WORKSPACE_DIR", str(dest))
    before = state(top, dest)
    clock.advance(31)
    worker = stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30))
    await worker.run_until_idle()
    assert state(top, dest) == before
    run = await client.get(run_id)
    assert run.status == RunStatus.INCOMPATIBLE
    assert "WorkspaceUnsafe" in str(run.error) and "nothing was written" in str(run.error)
    assert not [p for p in dest.rglob("*") if not p.is_dir()]  # not even inside
    clock.advance(31)
    await worker.run_until_idle()  # a stopped run is for a person: not claimed again
    assert len(await client.resumes(run_id)) == 1
    assert (await client.get(run_id)).status == RunStatus.INCOMPATIBLE


async def test_a_snapshot_naming_a_workspace_outside_the_runs_folder_is_refused(
    fstore: stead.Store, clock: stead.FakeClock, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app, client, run_id = await held_run(fstore, [["f", "file", 0o644, len(CONTENT), SHA]],
                                         name="../../escaped")
    top, base = sentinel(tmp_path / "sentinel")
    monkeypatch.setenv("STEAD_WORKSPACE_DIR", str(base))
    before = state(top, base)
    clock.advance(31)
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    run = await client.get(run_id)
    assert run.status == RunStatus.INCOMPATIBLE and "WorkspaceEscape" in str(run.error)
    assert state(top, base) == before


@pytest.mark.parametrize("url", ["nosuch://bucket/blobs", "http://127.0.0.1:9/blobs"])
async def test_a_snapshot_whose_blob_url_cannot_be_read_stops_the_run_with_a_typed_error(
    fstore: stead.Store, clock: stead.FakeClock, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, url: str,
) -> None:
    app, client, run_id = await held_run(
        fstore, [["f", "file", 0o644, len(CONTENT), SHA]], blobs=url)
    monkeypatch.setenv("STEAD_WORKSPACE_DIR", str(tmp_path / "restored"))
    clock.advance(31)
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    run = await client.get(run_id)
    assert run.status == RunStatus.INCOMPATIBLE, run
    assert "WorkspaceError" in str(run.error) and url in str(run.error)


async def test_a_run_id_that_is_no_folder_name_restores_nothing(
    fstore: stead.Store, clock: stead.FakeClock, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = stead.App("holder")

    @app.workflow()
    async def hold(run: stead.Run) -> str:
        return "never reached"

    run_id = "../../escaped"  # as a row written by hand, or by another tool, could hold
    await fstore.create_run(NewRun(run_id, "hold", 1, None, '{"args":[],"kwargs":{}}'))
    [row] = await fstore.claim("w1", ["hold@1"], 30.0, 1)
    await hostile_snapshot(fstore, run_id, "w1", row.epoch,
                           [["f", "file", 0o644, len(CONTENT), SHA]])
    top, base = sentinel(tmp_path / "sentinel")
    monkeypatch.setenv("STEAD_WORKSPACE_DIR", str(base))
    before = state(top, base)
    clock.advance(31)
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    assert state(top, base) == before
    run = await stead.Client(fstore, app).get(run_id)
    assert run.status == RunStatus.INCOMPATIBLE and "WorkspaceEscape" in str(run.error)


def test_removing_an_earlier_copy_that_is_a_link_changes_nothing_it_points_to(
    tmp_path: Path,
) -> None:
    top, dest = sentinel(tmp_path)
    (top / "other" / "sub").mkdir(mode=0o755)
    (top / "other" / "sub").chmod(0o555)
    before = state(top, dest)
    dest.symlink_to(top / "other")  # where a takeover would find an earlier copy
    trees.remove(dest)
    assert state(top, dest) == before and not os.path.lexists(dest)


@settings(max_examples=stress.examples(150), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(made=st.lists(rows, max_size=10).map(shaped))
# A folder below a link to a folder that holds it already.
@example(made=shaped([["..data/a/a", "dir", 0o755, 0, ""], ["a", "link", 0, 0, "..data"],
                      ["a/a/a", "dir", 0o755, 0, ""]]))
def test_a_tree_a_save_takes_has_every_link_inside_and_restores_exactly(
    tmp_path_factory: pytest.TempPathFactory, made: list[list[Any]],
) -> None:
    base = tmp_path_factory.mktemp("save")
    top = base / "ws"
    top.mkdir()
    for path, kind, _mode, _size, ref in made:
        where = top / path
        below_link = any((top / up).is_symlink() for up in Path(path).parents[:-1])
        if below_link or not where.parent.is_dir() or (kind == "link" and not ref):
            continue  # below a link or a file, or an empty link: no directory holds them
        if kind == "dir":
            where.mkdir()
        elif kind == "file":
            where.write_bytes(CONTENT)
        else:
            where.symlink_to(ref)
    try:
        tree = trees.scan(top)
    except stead.WorkspaceError:
        return
    assert_inside(top)  # the kernel agrees: every link a save took resolves inside
    dest = trees.write(trees.Tree.loads(tree.manifest), base / "dest", blob)
    assert {p.relative_to(dest): os.readlink(p) for p in dest.rglob("*") if p.is_symlink()} \
        == {p.relative_to(top): os.readlink(p) for p in top.rglob("*") if p.is_symlink()}
    assert trees.scan(dest).sha256 == tree.sha256


@pytest.mark.parametrize("git", ["[", '["commit"]', '{"commit": 7}', "[" * 100_000])
async def test_a_snapshot_whose_git_state_is_not_a_saves_is_refused_before_writing(
    store: stead.Store, tmp_path: Path, git: str,
) -> None:
    _app, _client, run_id = await held_run(store, [["f", "file", 0o644, len(CONTENT), SHA]])
    [snap] = await store.list_snapshots(run_id)
    with pytest.raises(stead.WorkspaceUnsafe, match="git state"):
        await workspaces.restore(store, snap.evolve(git=git), tmp_path / "dest")
    assert not (tmp_path / "dest").exists()
    done = await workspaces.restore(store, snap.evolve(git='{"commit": null}'),
                                    tmp_path / "dest")
    assert (done / "f").read_bytes() == CONTENT
