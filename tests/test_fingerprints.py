"""`fresh=stead.Fingerprint(...)`: a step's result is bound to the environment
it was made in (a workspace's snapshot, a lockfile, an image); it is reused
while that holds, made again once it does not, and if an effect followed it
the run pauses for a person instead. On both stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

import stead
from stead.files import trees
from stead.records import RecordKind, ResumeClass, RunStatus, StaleCause, StaleOutcome
from stead.views import timeline
from stead.web import create_app
from stead.workflow import fingerprints
from tests.helpers import Calls, Crash


def make_tester(root: Path, lock: Path, calls: Calls, sent: list[str], *,
               effect_after: bool) -> tuple[stead.App, Any]:
    app = stead.App("tester")

    def crash_once() -> None:
        if not calls["crash"]:
            calls.hit("crash")
            raise Crash()

    def run_tests(path: Any) -> dict[str, Any]:
        calls.hit("tests")
        return {"passed": True, "lock": lock.read_text(), "run": calls["tests"]}

    @app.workflow()
    async def check(run: stead.Run, repo: str) -> dict[str, Any]:
        ws = await run.workspace("repo", repo, root=root)
        await ws.save()
        report = await run.step("tests", run_tests, ws.path, fresh=stead.Fingerprint(
            workspace=ws, files=[str(lock)], image="python:3.12", extra={"os": "linux"}))
        if effect_after:
            await run.effect("publish", lambda op, r: sent.append(r["lock"]), report)
        await run.step("crash", crash_once)
        return dict(report)

    return app, check


async def _started(store: stead.Store, tmp_path: Path, *, effect_after: bool
                   ) -> tuple[stead.App, stead.Client, str, Path, Calls, list[str]]:
    root = tmp_path / "root"
    (root / "repo").mkdir(parents=True)
    (root / "repo" / "calc.py").write_text("x = 1\n")
    lock = tmp_path / "uv.lock"
    lock.write_text("L1")
    calls, sent = Calls(), []
    app, check = make_tester(root, lock, calls, sent, effect_after=effect_after)
    client = stead.Client(store, app)
    info = await client.start(check, str(root / "repo"))
    await stead.Worker(app, store, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    return app, client, info.run_id, lock, calls, sent


async def _take_over(app: stead.App, store: stead.Store, clock: stead.FakeClock) -> None:
    clock.advance(31)
    await stead.Worker(app, store, stead.WorkerOptions(lease_seconds=30)).run_until_idle()


@pytest.fixture(autouse=True)
def _restore_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEAD_WORKSPACE_DIR", str(tmp_path / "restored"))


async def test_a_result_is_reused_while_its_fingerprint_holds(
    fstore: stead.Store, clock: stead.FakeClock, tmp_path: Path,
) -> None:
    app, client, run_id, _lock, calls, _ = await _started(fstore, tmp_path, effect_after=False)
    await _take_over(app, fstore, clock)
    assert (await client.result(run_id, timeout=10))["run"] == 1
    assert calls["tests"] == 1
    [fp] = [r for r in await client.journal(run_id) if r.kind == RecordKind.FINGERPRINT]
    recorded = stead.codec.loads(fp.payload)
    assert recorded["image"] == "python:3.12" and recorded["extra"] == {"os": "linux"}
    assert recorded["workspace"]["tree"] is not None


async def test_a_changed_lockfile_makes_the_result_stale_and_it_runs_again(
    fstore: stead.Store, clock: stead.FakeClock, tmp_path: Path,
) -> None:
    app, client, run_id, lock, calls, _ = await _started(fstore, tmp_path, effect_after=False)
    lock.write_text("L2")  # the new worker's environment is another one
    await _take_over(app, fstore, clock)
    result = await client.result(run_id, timeout=10)
    assert (result["lock"], calls["tests"]) == ("L2", 2)
    journal = await client.journal(run_id)
    assert [r.kind for r in journal].count(RecordKind.CUT) == 1
    assert [r.name for r in journal if r.kind == RecordKind.STEP].count("tests") == 2
    [resume] = await client.resumes(run_id)
    assert resume.details.classes.get(ResumeClass.REVALIDATE) == 1
    # The record names the result it reran and the file that changed, old -> new.
    [stale] = resume.details.reran or []
    [fp] = [r for r in journal if r.kind == RecordKind.FINGERPRINT][:1]
    assert (stale["call"], stale["seq"]) == ("tests", fp.seq)
    assert (stale["cause"], stale["done"]) == (StaleCause.FINGERPRINT, StaleOutcome.RERUN)
    [changed] = stale["changed"]
    assert changed.startswith(f"files.{lock}: ") and " -> " in changed
    # Reused: the attachment and the save before the cut, not the cut fingerprint.
    assert resume.reused == 2
    shown = timeline.render_run(await client.get(run_id), journal, [resume])
    assert ("reused 2 record(s)  on task state v0\n    calls: results no longer holding, made "
            "again 1") in shown
    assert f"rerun: tests (seq {fp.seq}), its fingerprint changed: files.{lock}: " in shown
    assert "2 record(s) above reused" in shown
    # The dashboard's run page says the same, in the same words, in its
    # resume records.
    asgi = create_app(app, store=fstore, token="t" * 32, public=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://127.0.0.1:8484") as http:
        page = (await http.get(f"/runs/{run_id}?tab=resumes")).text
    assert "calls: results no longer holding, made again 1" in page
    assert f"rerun: tests (seq {fp.seq}), its fingerprint changed: files.{lock}: " in page
    await _take_over(app, fstore, clock)  # nothing left to do
    assert calls["tests"] == 2


async def test_a_stale_result_an_effect_followed_pauses_the_run(
    fstore: stead.Store, clock: stead.FakeClock, tmp_path: Path,
) -> None:
    app, client, run_id, lock, calls, sent = await _started(fstore, tmp_path, effect_after=True)
    assert sent == ["L1"]
    lock.write_text("L2")
    await _take_over(app, fstore, clock)
    info = await client.get(run_id)
    assert info.status == RunStatus.PAUSED
    message = str((info.error or {}).get("message"))
    assert "fingerprint changed" in message and "files." in message and "publish" in message
    assert (calls["tests"], sent) == (1, ["L1"])  # neither made again nor sent twice
    [resume] = await client.resumes(run_id)
    [stale] = resume.details.reran or []
    assert (stale["call"], stale["done"]) == ("tests", StaleOutcome.PAUSED)
    assert stale["changed"][0].startswith(f"files.{lock}: ")


def test_what_differs_between_two_fingerprints_is_named() -> None:
    before = {"files": {"uv.lock": "a" * 64}, "image": "python:3.11"}
    after = {"files": {"uv.lock": "b" * 64}, "image": "python:3.12", "extra": 1}
    assert [line.split(":")[0] for line in fingerprints.changes(before, after)] == [
        "extra", "files.uv.lock", "image"]


def test_a_fingerprint_refuses_what_it_cannot_record() -> None:
    with pytest.raises(TypeError):
        stead.Fingerprint(files="uv.lock")
    with pytest.raises(stead.SerializationError):
        stead.Fingerprint(extra={"x": object()})


def make_reader(root: Path, calls: Calls, fresh: stead.Fingerprint | None) -> tuple[
        stead.App, Any]:
    app = stead.App("reader")

    def crash_once() -> None:
        if not calls["crash"]:
            calls.hit("crash")
            raise Crash()

    def run_tests(path: Any) -> str:
        calls.hit("tests")
        return Path(path, "uv.lock").read_text()

    @app.workflow()
    async def check(run: stead.Run, repo: str) -> str:
        ws = await run.workspace("repo", repo, root=root)
        await run.step("plain", lambda: calls.hit("plain"))  # reads no workspace: unbound
        report: str = await run.step("tests", run_tests, ws.path, fresh=fresh)
        await run.step("crash", crash_once)
        return report

    return app, check


async def _read_then_crash(store: stead.Store, tmp_path: Path,
                           fresh: stead.Fingerprint | None
                           ) -> tuple[stead.App, stead.Client, str, Path, Calls]:
    root = tmp_path / "root"
    (root / "repo").mkdir(parents=True)
    (root / "repo" / "uv.lock").write_text("L1")
    (root / "repo" / "requirements-dev.txt").write_text("pytest\n")
    calls = Calls()
    app, check = make_reader(root, calls, fresh)
    client = stead.Client(store, app)
    info = await client.start(check, str(root / "repo"))
    await stead.Worker(app, store, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    return app, client, info.run_id, root / "repo", calls


async def test_a_step_that_reads_a_workspace_is_bound_to_its_environment_by_default(
    fstore: stead.Store, clock: stead.FakeClock, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(fingerprints.IMAGE_ENV, "sha256:img1")
    app, client, run_id, repo, calls = await _read_then_crash(fstore, tmp_path, None)
    [fp] = [r for r in await client.journal(run_id) if r.kind == RecordKind.FINGERPRINT]
    parts = stead.codec.loads(fp.payload)
    assert sorted(parts["lockfiles"]) == ["requirements-dev.txt", "uv.lock"]
    assert parts["runtime"]["image"] == "sha256:img1" and parts["runtime"]["python"]
    # No snapshot yet (the step changed nothing): a takeover attaches the same
    # directory, where someone changed the lockfile meanwhile.
    (repo / "uv.lock").write_text("L2")
    await _take_over(app, fstore, clock)
    assert await client.result(run_id, timeout=10) == "L2"
    assert (calls["tests"], calls["plain"]) == (2, 1)  # the bound result reran, alone
    [resume] = await client.resumes(run_id)
    [stale] = resume.details.reran or []
    assert stale["call"] == "tests" and stale["done"] == StaleOutcome.RERUN
    assert [c.split(":")[0] for c in stale["changed"]] == ["lockfiles.uv.lock"]


async def test_a_step_opted_out_of_its_environment_is_reused(
    fstore: stead.Store, clock: stead.FakeClock, tmp_path: Path,
) -> None:
    app, client, run_id, repo, calls = await _read_then_crash(
        fstore, tmp_path, stead.Fingerprint(environment=False))
    (repo / "uv.lock").write_text("L2")
    await _take_over(app, fstore, clock)
    assert await client.result(run_id, timeout=10) == "L1"  # the recorded result
    assert calls["tests"] == 1


async def test_relative_fingerprint_paths_resolve_against_the_workspace(
    fstore: stead.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "Cargo.lock").write_text("C1")
    monkeypatch.chdir(tmp_path)  # a Cargo.lock here would be another one
    (tmp_path / "Cargo.lock").write_text("other")
    app = stead.App("paths")

    @app.workflow()
    async def look(run: stead.Run) -> dict[str, Any]:
        ws = await run.workspace("ws", tmp_path / "ws", root=tmp_path)
        return await stead.Fingerprint(workspace=ws, files=["Cargo.lock"]).take()

    client = stead.Client(fstore, app)
    info = await client.start(look)
    await stead.Worker(app, fstore).run_until_idle()
    found = await client.result(info.run_id, timeout=10)
    assert found["files"] == {"Cargo.lock": trees.file_sha256(tmp_path / "ws" / "Cargo.lock")}


@pytest.mark.parametrize("change", ["nothing", "image", "lockfile"])
async def test_a_changed_environment_reruns_every_bound_step_from_the_first(
    fstore: stead.Store, clock: stead.FakeClock, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, change: str,
) -> None:
    """What docs/concepts/workspaces.md says of a takeover in another environment
    (another image; or a lockfile a later step changed, which the first step, before
    any snapshot, read from the tree): the first step bound to its environment (one
    given `ws.path`) no longer holds, the journal is cut there, and every step from it
    on runs again, the edits too, on the tree the takeover restored, which holds their
    edits already. In the same environment the replayed steps are not run again."""
    monkeypatch.setenv(fingerprints.IMAGE_ENV, "sha256:img1")
    root = tmp_path / "root"
    (root / "repo").mkdir(parents=True)
    (root / "repo" / "notes.txt").write_text("")
    (root / "repo" / "uv.lock").write_text("L1\n")
    calls = Calls()
    app = stead.App("editor")

    def append(path: Any, name: str, line: str) -> None:
        calls.hit(line)
        with Path(path, name).open("a") as notes:
            notes.write(line + "\n")

    def crash_once() -> None:
        if not calls["crash"]:
            calls.hit("crash")
            raise Crash()

    @app.workflow()
    async def edit(run: stead.Run, repo: str) -> str:
        ws = await run.workspace("repo", repo, root=root)
        await run.step("first", append, ws.path, "notes.txt", "first")
        await run.step("second", append, ws.path, "notes.txt", "second")
        if change == "lockfile":
            await run.step("lock", append, ws.path, "uv.lock", "L2")
        await run.step("crash", crash_once)
        return Path(ws.path, "notes.txt").read_text()

    client = stead.Client(fstore, app)
    info = await client.start(edit, str(root / "repo"))
    await stead.Worker(app, fstore, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    if change == "image":
        monkeypatch.setenv(fingerprints.IMAGE_ENV, "sha256:img2")
    await _take_over(app, fstore, clock)
    notes = await client.result(info.run_id, timeout=10)
    [resume] = await client.resumes(info.run_id)
    if change == "nothing":
        assert notes == "first\nsecond\n" and (calls["first"], calls["second"]) == (1, 1)
        assert not resume.details.reran
        return
    assert notes == "first\nsecond\nfirst\nsecond\n"
    assert (calls["first"], calls["second"]) == (2, 2)
    [stale] = resume.details.reran or []
    assert stale["call"] == "first" and stale["done"] == StaleOutcome.RERUN
    changed = {"image": "runtime.image", "lockfile": "lockfiles.uv.lock"}[change]
    assert [c.split(":")[0] for c in stale["changed"]] == [changed]
