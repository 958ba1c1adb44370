"""Workspaces: a run's directory is snapshotted durably, restored before replay
into a fresh directory on the worker that takes it over (checked against its
hash), never written by a stale worker, and bad input stores nothing. On both
stores."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stead
from stead.files import trees
from stead.records import Fence, NewRun, Record, RecordKind, SnapshotRow
from stead.workflow import workspaces
from tests.helpers import Calls, Crash


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (path / "pkg").mkdir()
    (path / "pkg" / "data.bin").write_bytes(bytes(range(256)) * 64)
    (path / "pkg" / "same.bin").write_bytes(bytes(range(256)) * 64)  # one blob for both
    (path / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (path / "run.sh").chmod(0o755)
    (path / "link.py").symlink_to("calc.py")
    return path


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                           "user.email=t@example.com", *args],
                          capture_output=True, check=True, text=True)
    return done.stdout.rstrip("\n")


def edit(path: Any) -> bool:
    file = Path(path, "calc.py")
    file.write_text(file.read_text().replace("a - b", "a + b"))
    return True


def coder_app(root: Path, calls: Calls, crashes: int = 1, **opts: Any
              ) -> tuple[stead.App, Any]:
    app = stead.App("coder")

    def crash_once() -> None:
        if calls["crash"] < crashes:
            calls.hit("crash")
            raise Crash()

    def counted_edit(path: Any) -> bool:
        calls.hit("edit")
        return edit(path)

    @app.workflow()
    async def fix(run: stead.Run, repo: str) -> dict[str, Any]:
        ws = await run.workspace("repo", repo, root=root, **opts)
        await run.step("edit", counted_edit, ws.path)
        snap = await ws.save()
        await run.step("crash", crash_once)
        return {"path": str(ws.path), "calc": Path(ws.path, "calc.py").read_text(),
                "tree": snap.tree, "link": Path(ws.path, "link.py").read_text()}

    return app, fix


async def take_over(app: stead.App, store: stead.Store, clock: stead.FakeClock) -> None:
    clock.advance(31)
    await stead.Worker(app, store, stead.WorkerOptions(lease_seconds=30)).run_until_idle()


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    found = {"root": tmp_path / "a", "b": tmp_path / "b"}
    found["root"].mkdir()
    monkeypatch.setenv("STEAD_WORKSPACE_DIR", str(tmp_path / "a" / "restored"))
    return found


async def test_a_takeover_restores_the_saved_tree_into_a_fresh_directory(
    fstore: stead.Store, clock: stead.FakeClock, dirs: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls()
    repo = make_repo(dirs["root"] / "repo")
    app, fix = coder_app(dirs["root"], calls)
    client = stead.Client(fstore, app)
    info = await client.start(fix, str(repo))
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    shutil.rmtree(dirs["root"])  # the first worker's machine is gone, with its directory
    monkeypatch.setenv("STEAD_WORKSPACE_DIR", str(dirs["b"]))
    monkeypatch.setattr(workspaces, "_BATCH_BYTES", 1000)  # a round trip per blob or two
    await take_over(app, fstore, clock)
    result = await client.result(info.run_id, timeout=10)
    assert Path(result["path"]).parent.parent == dirs["b"]  # fresh, on the new worker
    assert "a + b" in result["calc"] and calls["edit"] == 1  # the edit was not redone
    assert result["link"] == result["calc"]  # the link came back as a link
    assert (Path(result["path"]) / "run.sh").stat().st_mode & 0o111
    assert trees.scan(Path(result["path"])).sha256 == result["tree"]
    # The edit step's snapshot rode with its result; the explicit save after
    # it found the same tree and stored no second snapshot.
    [snap] = await client.snapshots(info.run_id)
    assert (snap.name, snap.tree, snap.epoch) == ("repo", result["tree"], 1)
    assert snap.files == 4 and snap.stored_bytes == snap.bytes - 256 * 64  # stored once
    assert (Path(result["path"]) / "pkg" / "same.bin").read_bytes() == bytes(range(256)) * 64
    [resume] = await client.resumes(info.run_id)
    restored = resume.details.workspaces or {}
    assert restored["repo"]["seq"] == snap.seq and restored["repo"]["path"] == result["path"]


async def test_blobs_are_stored_once_however_many_snapshots_hold_them(
    store: stead.Store, dirs: dict[str, Path],
) -> None:
    app = stead.App("saver")
    repo = make_repo(dirs["root"] / "repo")

    @app.workflow()
    async def saves(run: stead.Run, path: str) -> list[str]:
        ws = await run.workspace("repo", path, root=dirs["root"])
        first = await ws.save()
        await run.step("edit", edit, path)
        second = await ws.save()
        return [first.tree, second.tree]

    client = stead.Client(store, app)
    info = await client.start(saves, str(repo))
    await stead.Worker(app, store).run_until_idle()
    first, second = await client.result(info.run_id, timeout=10)
    assert first != second
    a, b = await client.snapshots(info.run_id)
    assert a.stored_bytes == a.bytes - 256 * 64  # pkg/same.bin is pkg/data.bin again
    changed = len((repo / "calc.py").read_bytes())
    assert b.stored_bytes == changed  # only the edited file's new content was added


async def test_a_git_tree_records_commit_patch_and_untracked_files_and_restores(
    store: stead.Store, dirs: dict[str, Path], tmp_path: Path,
) -> None:
    repo = make_repo(dirs["root"] / "repo")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "start")
    commit = git(repo, "rev-parse", "HEAD")
    edit(str(repo))
    (repo / "notes.txt").write_text("untracked\n")
    app = stead.App("gitter")

    @app.workflow()
    async def save(run: stead.Run, path: str) -> dict[str, Any]:
        ws = await run.workspace("repo", path, root=dirs["root"])
        snap = await ws.save()
        return {"commit": snap.commit, "dirty": snap.dirty, "untracked": list(snap.untracked)}

    client = stead.Client(store, app)
    info = await client.start(save, str(repo))
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=10) == {
        "commit": commit, "dirty": True, "untracked": ["notes.txt"]}
    dest = tmp_path / "by-hand"
    snap = await client.restore_workspace(info.run_id, "repo", dest)
    assert git(dest, "rev-parse", "HEAD") == commit
    assert "a + b" in (dest / "calc.py").read_text()
    assert git(dest, "status", "--porcelain").splitlines() == [" M calc.py", "?? notes.txt"]
    assert snap.git is not None and '"patch_bytes": 0' not in snap.git
    patch = await client.workspace_patch(info.run_id, "repo")
    assert patch == subprocess.run(["git", "-C", str(repo), "diff", "--binary", "HEAD"],
                                   capture_output=True, check=True).stdout
    assert b"+    return a + b" in patch


async def test_a_restored_git_tree_is_not_saved_again_by_a_step_that_changes_nothing(
    fstore: stead.Store, clock: stead.FakeClock, dirs: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A restore writes every file anew, so the index's cached file times no
    # longer match: git asked about the tree refreshes them in .git/index
    # unless told not to, and that would be a change no step made.
    calls = Calls()
    repo = make_repo(dirs["root"] / "repo")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "start"]):
        git(repo, *args)
    app = stead.App("gitreader")

    def crash_once() -> None:
        if calls["crash"] < 1:
            calls.hit("crash")
            raise Crash()

    @app.workflow()
    async def read(run: stead.Run, path: str) -> str:
        ws = await run.workspace("repo", path, root=dirs["root"])
        await run.step("edit", edit, ws.path)  # saved with its result: an uncommitted change
        await run.step("crash", crash_once)
        return str(await run.step("read", lambda p: Path(p, "calc.py").read_text(), ws.path))

    client = stead.Client(fstore, app)
    info = await client.start(read, str(repo))
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    monkeypatch.setenv("STEAD_WORKSPACE_DIR", str(dirs["b"]))
    await take_over(app, fstore, clock)
    assert "a + b" in await client.result(info.run_id, timeout=10)
    [snap] = await client.snapshots(info.run_id)  # the steps after the restore changed nothing
    assert snap.epoch == 1 and snap.git is not None and '"dirty": true' in snap.git
    [resume] = await client.resumes(info.run_id)
    restored = Path((resume.details.workspaces or {})["repo"]["path"])
    assert trees.scan(restored).sha256 == snap.tree  # stead's git left .git/index as restored
    assert git(restored, "status", "--porcelain") == " M calc.py"


async def test_the_cli_prints_a_snapshots_patch_or_says_it_has_none(
    store: stead.Store, dirs: dict[str, Path], db_url: str, tmp_path: Path,
) -> None:
    from click.testing import CliRunner

    from stead.cli import main

    repo = make_repo(dirs["root"] / "repo")
    app = stead.App("patcher")

    @app.workflow()
    async def save(run: stead.Run, path: str) -> None:
        ws = await run.workspace("repo", path, root=dirs["root"])
        await ws.save()  # no git repository yet: no patch
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "start"]):
            git(repo, *args)
        edit(str(repo))
        await ws.save()

    client = stead.Client(store, app)
    info = await client.start(save, str(repo))
    await stead.Worker(app, store).run_until_idle()
    await client.result(info.run_id, timeout=10)
    first, _second = await client.snapshots(info.run_id)

    def stead_cli(*args: str) -> Any:
        return CliRunner().invoke(main, ["--db", db_url, "workspace", "patch", *args])

    shown = await asyncio.to_thread(stead_cli, info.run_id, "repo")
    assert shown.exit_code == 0 and shown.stdout_bytes.startswith(b"diff --git a/calc.py")
    into = tmp_path / "fix.patch"
    wrote = await asyncio.to_thread(stead_cli, info.run_id, "repo", "-o", str(into))
    assert wrote.exit_code == 0 and into.read_bytes() == shown.stdout_bytes
    none = await asyncio.to_thread(stead_cli, info.run_id, "repo", "--seq", str(first.seq))
    assert none.exit_code == 1 and "holds no uncommitted patch" in none.output
    assert f"stead workspace restore {info.run_id} repo DIR" in none.output


async def crashed_coder(store: stead.Store, dirs: dict[str, Path], calls: Calls, url: str
                        ) -> tuple[stead.App, stead.Client, stead.RunInfo]:
    """The coder run up to its crash, its blobs under `url`."""
    repo = make_repo(dirs["root"] / "repo")
    app, fix = coder_app(dirs["root"], calls, blobs=url)
    client = stead.Client(store, app)
    info = await client.start(fix, str(repo))
    await stead.Worker(app, store, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    return app, client, info


async def test_blobs_in_a_directory_through_fsspec(
    fstore: stead.Store, clock: stead.FakeClock, dirs: dict[str, Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls()
    url = (tmp_path / "blobs").as_uri()
    app, client, info = await crashed_coder(fstore, dirs, calls, url)
    shutil.rmtree(dirs["root"] / "repo")
    monkeypatch.setenv("STEAD_WORKSPACE_DIR", str(dirs["b"]))
    await take_over(app, fstore, clock)
    result = await client.result(info.run_id, timeout=10)
    assert "a + b" in result["calc"] and calls["edit"] == 1
    [snap] = await client.snapshots(info.run_id)
    assert snap.blobs == url
    blob_hashes = list(trees.Tree.loads(snap.manifest).blobs())
    assert await fstore.read_blobs(blob_hashes) == {}  # none went to the database
    assert len(list((tmp_path / "blobs").rglob("*"))) > len(blob_hashes)


async def test_a_restored_tree_that_does_not_hash_as_saved_stops_the_run(
    fstore: stead.Store, clock: stead.FakeClock, dirs: dict[str, Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls()
    app, client, info = await crashed_coder(fstore, dirs, calls, (tmp_path / "blobs").as_uri())
    [snap] = await client.snapshots(info.run_id)
    calc = next(e for e in trees.Tree.loads(snap.manifest).entries if e.path == "calc.py")
    [blob] = [p for p in (tmp_path / "blobs").rglob(calc.sha256)]
    blob.write_text("def add(a, b):\n    return 0\n")  # the stored content was tampered with
    monkeypatch.setenv("STEAD_WORKSPACE_DIR", str(dirs["b"]))
    await take_over(app, fstore, clock)
    run = await client.get(info.run_id)
    assert run.status == stead.records.RunStatus.INCOMPATIBLE
    assert "workspace 'repo'" in str(run.error) and "differs" in str(run.error)
    assert not dirs["b"].exists() or not any(dirs["b"].rglob("calc.py"))  # nothing half-written
    [resume] = await client.resumes(info.run_id)
    assert "stopped" in str((resume.details.intent or {}).get("decision"))
    assert calls["crash"] == 1  # the workflow did not go on


# -- bad input: typed errors, nothing stored -------------------------------------------
async def _fails_with(store: stead.Store, app: stead.App, wf: Any, *args: Any) -> stead.RunInfo:
    client = stead.Client(store, app)
    info = await client.start(wf, *args)
    await stead.Worker(app, store).run_until_idle()
    info = await client.get(info.run_id)
    assert info.status == stead.records.RunStatus.FAILED
    assert await client.snapshots(info.run_id) == []
    assert not [r for r in await client.journal(info.run_id) if r.kind == RecordKind.WORKSPACE
                and r.digest == "save"]
    return info


def saver(root: Path) -> tuple[stead.App, Any]:
    app = stead.App("saver")

    @app.workflow()
    async def save(run: stead.Run, path: str, limit: int) -> str:
        ws = await run.workspace("repo", path, root=root, max_bytes=limit)
        return (await ws.save()).tree

    return app, save


async def test_a_path_outside_the_root_is_refused(
    store: stead.Store, dirs: dict[str, Path], tmp_path: Path,
) -> None:
    outside = make_repo(tmp_path / "elsewhere")
    app, save = saver(dirs["root"])
    info = await _fails_with(store, app, save, str(outside), 10**6)
    assert "WorkspaceOutsideRoot" in str(info.error) and "allowed root" in str(info.error)
    escaping = dirs["root"] / "up"
    app, save = saver(dirs["root"])
    info = await _fails_with(store, app, save, f"{escaping}/../../elsewhere", 10**6)
    assert "WorkspaceOutsideRoot" in str(info.error)


async def test_a_symlink_escaping_the_workspace_is_refused_and_nothing_is_stored(
    store: stead.Store, dirs: dict[str, Path], tmp_path: Path,
) -> None:
    repo = make_repo(dirs["root"] / "repo")
    (tmp_path / "secret").write_text("s3cret")
    (repo / "pkg" / "leak").symlink_to("../../../secret")
    app, save = saver(dirs["root"])
    info = await _fails_with(store, app, save, str(repo), 10**6)
    assert "WorkspaceEscape" in str(info.error) and "leak" in str(info.error)
    hashes = [trees.file_sha256(p) for p in (repo / "calc.py", repo / "pkg" / "data.bin")]
    assert await store.read_blobs(hashes) == {}


async def test_a_chain_of_links_leading_out_is_refused_and_nothing_is_stored(
    store: stead.Store, dirs: dict[str, Path],
) -> None:
    repo = make_repo(dirs["root"] / "repo")
    (repo / "pkg" / "up").symlink_to("..")  # the workspace's top: inside
    (repo / "out").symlink_to("pkg/up/..")  # its parent, through pkg/up
    app, save = saver(dirs["root"])
    info = await _fails_with(store, app, save, str(repo), 10**6)
    assert "WorkspaceEscape" in str(info.error) and "'out'" in str(info.error)
    assert await store.read_blobs([trees.file_sha256(repo / "calc.py")]) == {}


async def test_a_tree_over_the_size_limit_is_refused_and_nothing_is_stored(
    store: stead.Store, dirs: dict[str, Path],
) -> None:
    repo = make_repo(dirs["root"] / "repo")
    app, save = saver(dirs["root"])
    info = await _fails_with(store, app, save, str(repo), 1000)
    assert "WorkspaceTooLarge" in str(info.error) and "1000 bytes" in str(info.error)
    assert await store.read_blobs([trees.file_sha256(repo / "calc.py")]) == {}


async def test_a_stale_workers_save_raises_stale_lease_and_stores_nothing(
    store: stead.Store, dirs: dict[str, Path],
) -> None:
    await store.create_run(NewRun("r1", "wf", 1, None, '{"args":[],"kwargs":{}}'))
    [row] = await store.claim("w1", ["wf@1"], 30.0, 1)
    await store.cancel_run("r1")  # another epoch: w1's fence no longer holds
    repo = make_repo(dirs["root"] / "repo")
    tree = trees.scan(repo)
    snap = SnapshotRow("r1", "repo", 0, row.epoch, "w1", tree.sha256, tree.manifest, None,
                       tree.files, tree.bytes, 0, None, str(repo), 0.0)
    rec = Record(0, "0", 1, RecordKind.WORKSPACE, "repo", "save", "ok", "{}", row.epoch, 0.0)
    located = tree.blobs()
    with pytest.raises(stead.StaleLease):
        await store.save_snapshot(
            Fence("r1", row.epoch, "w1"), [rec], None, snap, list(located),
            lambda h: (repo / located[h]).read_bytes())
    assert await store.list_snapshots("r1") == []
    assert await store.read_blobs(list(located)) == {}
    assert await store.load_journal("r1") == []


# -- the tree itself ----------------------------------------------------------------
names = st.text(alphabet="abcxyz", min_size=1, max_size=4)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.dictionaries(st.lists(names, min_size=1, max_size=3).map("/".join),
                             st.binary(max_size=64), max_size=8))
def test_any_tree_restores_to_the_same_hash(tmp_path_factory: pytest.TempPathFactory,
                                            files: dict[str, bytes]) -> None:
    base = tmp_path_factory.mktemp("tree")
    src = base / "src"
    src.mkdir()
    for rel, data in files.items():
        path = src / rel
        if any(p.is_file() for p in path.parents if p != src) or path.is_dir():
            continue  # a name used both as a file and a folder
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    tree = trees.scan(src)
    located = tree.blobs()
    dest = trees.write(tree, base / "dest", lambda h: (src / located[h]).read_bytes())
    assert trees.scan(dest).sha256 == tree.sha256
    assert not [p for p in base.iterdir() if p.name.endswith(".partial")]


# -- for a person: stead runs show, stead workspace restore -------------------------
async def test_the_cli_lists_workspaces_and_restores_one_by_hand(
    fstore: stead.Store, clock: stead.FakeClock, dirs: dict[str, Path], db_url: str,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    from stead.cli import main

    calls = Calls()
    app, fix = coder_app(dirs["root"], calls)
    client = stead.Client(fstore, app)
    info = await client.start(fix, str(make_repo(dirs["root"] / "repo")))
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    monkeypatch.setenv("STEAD_WORKSPACE_DIR", str(dirs["b"]))
    await take_over(app, fstore, clock)
    [snap] = await client.snapshots(info.run_id)

    async def stead_cli(*args: str) -> Any:
        # In a thread: the command runs its own event loop, as from a shell.
        return await asyncio.to_thread(CliRunner().invoke, main, ["--db", db_url, *args])

    shown = await stead_cli("runs", "show", info.run_id)
    assert shown.exit_code == 0, shown.output
    assert f"repo  attached {dirs['root'] / 'repo'}" in shown.output
    assert f"snapshot seq {snap.seq}  epoch 1" in shown.output and snap.tree[:12] in shown.output
    assert "epoch 2 by" in shown.output and f"repo from seq {snap.seq} into {dirs['b']}" in (
        shown.output)
    as_json = await stead_cli("runs", "show", info.run_id, "--json")
    assert stead.codec.loads(as_json.output)["snapshots"][0]["tree"] == snap.tree
    dest = tmp_path / "by-hand"
    done = await stead_cli("workspace", "restore", info.run_id, "repo", str(dest))
    assert done.exit_code == 0, done.output
    assert trees.scan(dest).sha256 == snap.tree
    again = await stead_cli("workspace", "restore", info.run_id, "repo", str(dest))
    assert again.exit_code == 1 and "exists already" in again.output
    unknown = await stead_cli("workspace", "restore", info.run_id, "nope", str(tmp_path / "x"))
    assert unknown.exit_code == 1 and "no snapshot of workspace 'nope'" in unknown.output


async def test_a_workflow_that_lost_its_run_gets_stale_lease_from_save(
    fstore: stead.Store, clock: stead.FakeClock, dirs: dict[str, Path],
) -> None:
    app = stead.App("saver")
    seen: list[BaseException] = []
    repo = make_repo(dirs["root"] / "repo")

    async def taken_over() -> None:
        clock.advance(31)  # the lease ran out: another worker claims the run
        assert await fstore.claim("thief", ["save@1"], 30.0, 1)

    @app.workflow()
    async def save(run: stead.Run, path: str) -> str:
        ws = await run.workspace("repo", path, root=dirs["root"])
        await taken_over()  # not a step: nothing is written between the claim and the save
        try:
            return (await ws.save()).tree
        except stead.StaleLease as exc:
            seen.append(exc)
            raise

    info = await stead.Client(fstore, app).start(save, str(repo))
    worker = stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30))
    task = asyncio.create_task(worker.run())
    for _ in range(500):  # the thief holds the run now: no worker would finish it
        if seen:
            break
        await asyncio.sleep(0.01)
    worker.stop()
    await task
    assert [type(e) for e in seen] == [stead.StaleLease]
    assert await fstore.list_snapshots(info.run_id) == []
    assert await fstore.read_blobs([trees.file_sha256(repo / "calc.py")]) == {}


async def test_a_later_takeover_on_the_same_machine_removes_the_earlier_copy(
    fstore: stead.Store, clock: stead.FakeClock, dirs: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls()
    app, fix = coder_app(dirs["root"], calls, crashes=2)
    client = stead.Client(fstore, app)
    info = await client.start(fix, str(make_repo(dirs["root"] / "repo")))
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    monkeypatch.setenv("STEAD_WORKSPACE_DIR", str(dirs["b"]))
    await take_over(app, fstore, clock)  # restores at epoch 2, crashes again
    await take_over(app, fstore, clock)  # restores at epoch 3
    result = await client.result(info.run_id, timeout=10)
    copies = sorted(p.name.split(".")[1] for p in (dirs["b"] / info.run_id).iterdir())
    assert copies == ["3"] and Path(result["path"]).name.startswith("repo.3.")
    assert calls["edit"] == 1


async def test_a_step_that_changes_the_tree_is_saved_with_its_result_incrementally(
    fstore: stead.Store, clock: stead.FakeClock, dirs: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls()
    repo = make_repo(dirs["root"] / "repo")
    app = stead.App("coder")

    def write_note(path: Any, text: str) -> str:
        calls.hit(f"note {text}")
        Path(path, "note.txt").write_text(text)
        return text

    def crash_once() -> None:
        if calls["crash"] < 1:
            calls.hit("crash")
            raise Crash()

    @app.workflow()
    async def notes(run: stead.Run, repo: str) -> dict[str, Any]:
        ws = await run.workspace("repo", repo, root=dirs["root"])
        await run.step("look", lambda: calls.hit("look"))  # changes nothing: no snapshot
        await run.step("first", write_note, ws.path, "one")
        await run.step("second", write_note, ws.path, "two")
        await run.step("crash", crash_once)
        return {"note": Path(ws.path, "note.txt").read_text(), "tree": ws.snapshot and
                ws.snapshot.tree}

    client = stead.Client(fstore, app)
    info = await client.start(notes, str(repo))
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    shutil.rmtree(dirs["root"])
    monkeypatch.setenv("STEAD_WORKSPACE_DIR", str(dirs["b"]))
    await take_over(app, fstore, clock)
    result = await client.result(info.run_id, timeout=10)

    assert result["note"] == "two"  # the last step's file, with no explicit save
    assert (calls["note one"], calls["note two"], calls["look"]) == (1, 1, 1)  # none redone
    journal = {r.seq: r for r in await client.journal(info.run_id)}
    first, second = await client.snapshots(info.run_id)
    assert [journal[s.seq - 1].name for s in (first, second)] == ["first", "second"]
    assert second.tree == result["tree"]
    assert first.stored_bytes == first.bytes - 256 * 64  # the duplicate blob once
    assert second.stored_bytes == len("two")  # only the changed file's blob


async def test_restored_copies_are_no_part_of_a_workspace_attached_as_dot(
    fstore: stead.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    repo = make_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    monkeypatch.delenv("STEAD_WORKSPACE_DIR", raising=False)
    # What an earlier takeover on this machine restored, by default here.
    (repo / ".stead-workspaces" / "run" / "repo.1.x").mkdir(parents=True)
    (repo / ".stead-workspaces" / "run" / "repo.1.x" / "calc.py").write_text("old copy\n")
    app = stead.App("dot")

    @app.workflow()
    async def keep(run: stead.Run) -> str:
        ws = await run.workspace("repo", ".")
        return (await ws.save()).tree

    client = stead.Client(fstore, app)
    info = await client.start(keep)
    await stead.Worker(app, fstore).run_until_idle()
    tree = await client.result(info.run_id, timeout=10)
    [snap] = await client.snapshots(info.run_id)
    paths = [entry.path for entry in trees.Tree.loads(snap.manifest).entries]
    assert snap.tree == tree and "calc.py" in paths
    assert not [p for p in paths if p.startswith(".stead-workspaces")]
