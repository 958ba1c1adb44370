"""The crash matrix (`stead.testing.crash_matrix`, `stead chaos`, the pytest
fixture) and the stale-worker helper.

The project's examples pass their matrix on both stores; the example broken on
purpose (a refund in a plain step) is caught, and the report names the point
and the key that was called twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import stead
from stead.cli import main
from stead.testing import Boundary, MatrixReport, Services, crash_matrix, stale_worker
from stead.testing.examples import EXAMPLES
from stead.testing.points import enumerate_points
from stead.testing.report import STOPPED
from tests.workers import chaos_app

# Process-level, crash or long property tests: `pytest --full` (CI) runs them.
pytestmark = pytest.mark.slow

GOOD = {e.title: e for e in EXAMPLES if not e.broken}
LANGGRAPH = "stead.examples.langgraph_refund:app"
BROKEN = next(e for e in EXAMPLES if e.broken)


# -- the points of a run ----------------------------------------------------------
def test_every_write_gives_two_points_an_effect_its_send_a_wait_two_more() -> None:
    tally = [
        {"records": [["step", "load", "ok"]], "finish": None},
        {"records": [["wait", "approval", "open"]], "finish": None},
        {"records": [["effect", "charge", "intent"]], "finish": None},
        {"records": [["effect", "charge", "ok"], ["now", "now", "ok"]], "finish": None},
        {"records": [["now", "now", "ok"]], "finish": None},
        {"records": [], "finish": "completed"},
    ]
    points = enumerate_points(tally)
    assert [(p.boundary, p.crash, p.wait) for p in points] == [
        (Boundary.BEFORE, "before:1", None), (Boundary.AFTER, "after:1", None),
        (Boundary.BEFORE, "before:2", None), (Boundary.AFTER, "after:2", None),
        (Boundary.BEFORE, "before:3", None), (Boundary.AFTER, "after:3", None),
        (Boundary.IN_SEND, "before:2:charge", None), (Boundary.AFTER, "after:4", None),
        (Boundary.BEFORE, "before:5", None), (Boundary.AFTER, "after:5", None),
        (Boundary.WAITING, None, 1), (Boundary.DELIVERY, None, 1),
        (Boundary.BEFORE, "before:6", None), (Boundary.AFTER, "after:6", None),
    ]
    assert points[6].where == "inside effect charge's send, before write 4 commits " \
                              "(effect charge: ok)"
    assert points[9].where == "after write 5 commits (the run suspends)"
    assert points[13].where == "after write 6 commits (the run's end (completed))"


# -- the examples ------------------------------------------------------------------
def _kinds(report: MatrixReport) -> set[Boundary]:
    return {p.point.boundary for p in report.points}


@pytest.mark.slow
@pytest.mark.parametrize("title", list(GOOD))
async def test_the_examples_pass_their_crash_matrix(
    db_url: str, tmp_path: Path, title: str
) -> None:
    example = GOOD[title]
    workflow = example.workflow
    report = await example.run(tmp_path, db=db_url)
    report.assert_ok()
    assert report.reference.status == "completed"
    assert all(p.recovered_in is not None for p in report.points)
    assert {Boundary.BEFORE, Boundary.AFTER} <= _kinds(report)
    if example.app == LANGGRAPH:
        _langgraph_refunds_once(report, checked=example.args == ["123"])
    elif workflow == "refund_order":
        assert {Boundary.IN_SEND, Boundary.WAITING, Boundary.DELIVERY} <= _kinds(report)
        assert all(p.events_once for p in report.points)
        # Killed inside the mail's send, it is resent under the same key: allowed,
        # the effect is idempotent and the mailbox dedups.
        resent = [c for p in report.points for c in p.calls if c.calls > 1]
        assert resent and all(c.effect == "send_confirmation_link" for c in resent)
        refunds = [c for p in report.points for c in p.calls if c.effect == "dispatch_refund"]
        assert refunds and all(c.calls == 1 for c in refunds)
    if workflow == "fix_and_test":
        assert Boundary.IN_SEND in _kinds(report)
        submits = [c for p in report.points for c in p.calls if c.effect == "run_ci"]
        assert len(submits) == len(report.points) and all(c.calls == 1 for c in submits)


def _langgraph_refunds_once(report: MatrixReport, *, checked: bool) -> None:
    """Killed anywhere, the graph's effect node refunds at most once. Killed
    between its intent and its outcome, its check is asked and the run
    completes; without a check, the run stops for a person there."""
    kinds = _kinds(report)
    assert {Boundary.IN_SEND, Boundary.WAITING, Boundary.DELIVERY} <= kinds
    assert all(p.events_once for p in report.points)
    refunds = [c for p in report.points for c in p.calls if c.effect == "node refund"]
    assert refunds and all(c.calls == 1 for c in refunds)
    stopped = {p.point.where for p in report.points if p.status == "outcome_unknown"}
    if checked:
        assert not stopped
        assert all(p.status == "completed" and p.same_result for p in report.points)
        return
    assert stopped == {"after write 7 commits (effect node refund: intent)",
                       "inside effect node refund's send, before write 8 commits "
                       "(effect node refund: ok)"}


@pytest.mark.slow
async def test_an_effect_in_a_plain_step_is_caught_and_named(
    db_url: str, tmp_path: Path
) -> None:
    report = await BROKEN.run(tmp_path, db=db_url)
    assert not report.ok
    [failed] = report.failures
    assert failed.point.where == "before write 1 commits (step refund)"
    assert failed.status == "completed" and failed.same_result  # only the outside tells
    [problem] = failed.problems
    assert problem.startswith("2 calls under key refund-123: no effect of the run has this key")
    with pytest.raises(AssertionError, match="before write 1 commits"):
        report.assert_ok()


# -- stead chaos -------------------------------------------------------------------
@pytest.mark.slow
def test_stead_chaos_exits_1_and_names_the_failing_point(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [
        "chaos", "stead.examples.broken:app", "refund_in_a_step", '["123", 4200]',
        "--services", "stead.testing.examples:SERVICES", "--keep", str(tmp_path / "work"),
    ])
    assert result.exit_code == 1, result.output
    assert "FAIL   1. before write 1 commits (step refund): 2 calls under key " \
           "refund-123" in result.output
    assert "4 points, 1 failed" in result.output
    assert (tmp_path / "work" / "matrix.db").exists()  # --keep without --db: SQLite there


@pytest.mark.slow
def test_stead_chaos_passes_a_sound_workflow_and_prints_markdown() -> None:
    result = CliRunner().invoke(main, [
        "chaos", "tests.workers.chaos_app:app", "greet", '["ada"]', "--markdown",
    ])
    assert result.exit_code == 0, result.output
    assert "| # | the worker was killed |" in result.output
    assert "inside effect send's send" in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["nope:app", "greet"], "cannot import module 'nope'"),
    (["tests.workers.chaos_app:app", "greet", "{}"], "must be a JSON array"),
    (["tests.workers.chaos_app:app", "greet", "[]", "--services", "stead:Client"],
     "is not a stead.testing.Services"),
    (["tests.workers.chaos_app:app", "greet", "[]", "--events", "stead.testing:nope"],
     "cannot load"),
])
def test_stead_chaos_refuses_bad_input_in_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["chaos", *args])
    assert result.exit_code == 1, result.output
    assert message in result.output
    assert "Traceback" not in result.output


# -- the pytest fixture --------------------------------------------------------------
@pytest.mark.slow
async def test_the_fixture_runs_the_matrix_and_a_stop_for_a_human_passes(
    crash_matrix: Any, tmp_path: Path
) -> None:
    report: MatrixReport = await crash_matrix(
        chaos_app.app, "greet", ["ada"], services=Services(calls=chaos_app.sent_per_key))
    report.assert_ok()
    assert (tmp_path / "crash-matrix" / "point-001").is_dir()
    # Neither idempotent nor checkable: killed between its intent and its outcome,
    # the effect may or may not have been sent, so the run stops for a human.
    stopped = {p.point.where: p for p in report.points if p.status == "outcome_unknown"}
    assert set(stopped) == {"after write 2 commits (effect send: intent)",
                            "inside effect send's send, before write 3 commits (effect send: ok)"}
    assert all(p.verdict == STOPPED for p in stopped.values())
    assert [[c.calls for c in p.calls] for p in stopped.values()] == [[], [1]]
    others = [p for p in report.points if p.status != "outcome_unknown"]
    assert all(p.status == "completed" and p.same_result for p in others)
    assert all([c.calls for c in p.calls] == [1] for p in others)


async def test_an_unknown_workflow_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(stead.UnknownWorkflow, match="no workflow nope"):
        await crash_matrix(chaos_app.app, "nope", [], folder=tmp_path)


# -- the stale worker ------------------------------------------------------------------
async def test_a_stale_worker_meets_stale_lease_and_the_run_goes_on(
    store: stead.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where the effect writes sent.log
    client = stead.Client(store, chaos_app.app)
    info = await client.start(chaos_app.greet, "ada")
    stale = await stale_worker(store, info.run_id)
    with pytest.raises(stead.StaleLease):
        await stale.write()
    assert not await stale.renew()
    assert stale.fencing_token < stale.current_token
    assert await store.load_journal(info.run_id) == []  # the stale write left nothing
    await stead.Worker(chaos_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "sent 'hello ada'"


async def test_a_stale_worker_needs_a_run_no_live_worker_holds(store: stead.Store) -> None:
    client = stead.Client(store, chaos_app.app)
    info = await client.start(chaos_app.greet, "ada")
    await store.claim("someone", ["greet@1"], 30.0, 1)
    with pytest.raises(stead.SteadError, match="could not be claimed"):
        await stale_worker(store, info.run_id, timeout=0.1)



async def test_a_stale_worker_on_a_fake_clock_needs_no_waiting(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    info = await stead.Client(fstore, chaos_app.app).start(chaos_app.greet, "ada")
    stale = await stale_worker(fstore, info.run_id, timeout=0.5)
    with pytest.raises(stead.StaleLease):
        await stale.write()


# -- the report in docs/ -------------------------------------------------------------
def test_the_docs_hold_each_examples_report() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "crash-matrix.md").read_text()
    assert "python -m stead.testing.examples docs/crash-matrix.md" in text
    for example in EXAMPLES:
        assert f"## {example.title}" in text
        assert f"`{example.app} {example.workflow}(" in text
    assert text.count(" 0 failed.") == len(GOOD)
    assert "**FAIL**: 2 calls under key refund-123" in text
