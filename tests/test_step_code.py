"""A step's result is bound to the code that made it: a digest of the step
function's code is journaled with the result, and a takeover by code whose
step body changed says so in the resume record and, per
`App(changed_steps=)`, reuses it with a warning, makes it again (when nothing
acted after it) or stops for a person. On both stores."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import stead
from stead import dryrun, stepcode
from stead.records import (
    Record,
    RecordKind,
    RecordStatus,
    ResumeClass,
    RunStatus,
    StaleCause,
    StaleOutcome,
)
from stead.replay import Journal
from stead.views import timeline
from tests.helpers import Calls, Crash


def plan_v1() -> str:
    return "A"


def plan_v2() -> str:
    return "B"


def make_app(made_by: Callable[[], str], calls: Calls, sent: list[str], *,
             changed_steps: str = "warn", effect_after: bool = False) -> stead.App:
    """The app as deployed with step "plan" of `made_by`'s body."""
    app = stead.App("planner", changed_steps=changed_steps)
    if made_by is plan_v1:
        def plan() -> str:
            calls.hit("plan")
            return "A"
    else:
        def plan() -> str:
            calls.hit("plan")
            return "B"

    def crash_once() -> None:
        if not calls["crash"]:
            calls.hit("crash")
            raise Crash()

    @app.workflow()
    async def check(run: stead.Run) -> str:
        made = await run.step("plan", plan)
        if effect_after:
            await run.effect("publish", lambda op, m: sent.append(m), made)
        await run.step("crash", crash_once)
        return made

    return app


async def _crashed(store: stead.Store, calls: Calls, sent: list[str], *,
                   effect_after: bool = False) -> str:
    """A run whose worker died after step "plan" (and, with `effect_after`,
    after an effect that followed it)."""
    app = make_app(plan_v1, calls, sent, effect_after=effect_after)
    info = await stead.Client(store, app).start(app.get("check", 1))
    await stead.Worker(app, store, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    return info.run_id


async def _take_over(app: stead.App, store: stead.Store, clock: stead.FakeClock
                     ) -> stead.Client:
    clock.advance(31)
    await stead.Worker(app, store, stead.WorkerOptions(lease_seconds=30)).run_until_idle()
    return stead.Client(store, app)


async def test_unchanged_code_is_reused_without_a_word(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    calls: Calls = Calls()
    run_id = await _crashed(fstore, calls, [])
    client = await _take_over(make_app(plan_v1, calls, []), fstore, clock)
    assert await client.result(run_id, timeout=10) == "A"
    assert calls["plan"] == 1
    [resume] = await client.resumes(run_id)
    assert not resume.details.reran


async def test_a_changed_step_is_reused_with_a_warning_by_default(
    fstore: stead.Store, clock: stead.FakeClock, caplog: pytest.LogCaptureFixture,
) -> None:
    calls: Calls = Calls()
    run_id = await _crashed(fstore, calls, [])
    with caplog.at_level(logging.WARNING, logger="stead.run"):
        client = await _take_over(make_app(plan_v2, calls, []), fstore, clock)
    assert await client.result(run_id, timeout=10) == "A"
    assert calls["plan"] == 1
    [resume] = await client.resumes(run_id)
    [entry] = resume.details.reran or []
    assert (entry["call"], entry["cause"], entry["done"]) == (
        "plan", StaleCause.CODE, StaleOutcome.REUSED)
    [changed] = entry["changed"]
    assert changed.startswith("code ") and " -> " in changed
    assert resume.details.classes.get(ResumeClass.REVALIDATE) == 1
    assert any("step 'plan'" in m and "reused as journaled" in m for m in caplog.messages)
    shown = timeline.render_run(await client.get(run_id), await client.journal(run_id),
                                [resume])
    assert f"reused: plan (seq {entry['seq']}), its code changed: {changed}" in shown


async def test_a_changed_step_runs_again_under_rerun(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    calls: Calls = Calls()
    run_id = await _crashed(fstore, calls, [])
    client = await _take_over(make_app(plan_v2, calls, [], changed_steps="rerun"), fstore,
                              clock)
    assert await client.result(run_id, timeout=10) == "B"
    assert calls["plan"] == 2
    journal = await client.journal(run_id)
    assert [r.kind for r in journal].count(RecordKind.CUT) == 1
    [resume] = await client.resumes(run_id)
    [entry] = resume.details.reran or []
    assert (entry["cause"], entry["done"]) == (StaleCause.CODE, StaleOutcome.RERUN)
    # The new result carries the new code: a later takeover finds nothing changed.
    await _take_over(make_app(plan_v2, calls, [], changed_steps="rerun"), fstore, clock)
    assert calls["plan"] == 2


async def test_a_changed_step_an_effect_followed_pauses_under_rerun(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    calls: Calls = Calls()
    sent: list[str] = []
    run_id = await _crashed(fstore, calls, sent, effect_after=True)
    assert sent == ["A"]
    client = await _take_over(
        make_app(plan_v2, calls, sent, changed_steps="rerun", effect_after=True), fstore, clock)
    row = await client.get(run_id)
    assert row.status == RunStatus.PAUSED
    assert "step 'plan''s code changed" in (row.error or {}).get("message", "")
    assert (calls["plan"], sent) == (1, ["A"])
    [resume] = await client.resumes(run_id)
    [entry] = resume.details.reran or []
    assert entry["done"] == StaleOutcome.PAUSED


async def test_a_changed_step_stops_the_run_under_stop(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    calls: Calls = Calls()
    run_id = await _crashed(fstore, calls, [])
    client = await _take_over(make_app(plan_v2, calls, [], changed_steps="stop"), fstore,
                              clock)
    row = await client.get(run_id)
    assert row.status == RunStatus.INCOMPATIBLE
    message = (row.error or {}).get("message", "")
    assert "step 'plan'" in message and "changed_steps" in message
    assert calls["plan"] == 1


async def test_replay_check_names_a_changed_step_before_a_deploy(
    fstore: stead.Store, clock: stead.FakeClock,
) -> None:
    calls: Calls = Calls()
    run_id = await _crashed(fstore, calls, [])
    stored = await stead.Client(fstore, make_app(plan_v1, calls, [])).export_run(run_id)
    [same] = await dryrun.replay_all(make_app(plan_v1, calls, []), [stored])
    assert same.changed_steps == () and same.finding is None
    [warned] = await dryrun.replay_all(make_app(plan_v2, calls, []), [stored])
    [line] = warned.changed_steps
    assert line.startswith("step 'plan' (seq ") and line.endswith(": reused")
    assert warned.finding is None
    assert line in dryrun.summary([warned])
    [stopped] = await dryrun.replay_all(make_app(plan_v2, calls, [], changed_steps="stop"),
                                        [stored])
    assert stopped.finding is not None and "step 'plan'" in stopped.finding.message
    assert calls["plan"] == 1  # a dry replay calls nothing


def test_a_journal_without_code_digests_replays_as_ever() -> None:
    base = "0" * 64
    old = Record(0, "0", 1, RecordKind.STEP, "plan", base, RecordStatus.OK, '"A"', 1, 0.0)
    journal = Journal("r", [old])
    code = stepcode.digest(plan_v2)
    assert journal.take("0", RecordKind.STEP, "plan", stepcode.coded(base, code)) == [old]
    assert stepcode.code_of(base) == (base, None)
    assert stepcode.code_of(stepcode.coded(base, code)) == (base, code)


def test_the_code_digest_covers_the_body_and_not_the_rest() -> None:
    def f(x: int) -> int:
        return x + 1

    def g(x: int) -> int:
        return x + 1

    def h(x: int) -> int:
        return x + 2

    def renamed(y: int) -> int:
        return y + 1

    assert stepcode.digest(f) == stepcode.digest(g) == stepcode.digest(renamed)
    assert stepcode.digest(f) != stepcode.digest(h)
    assert stepcode.digest(plan_v1) != stepcode.digest(plan_v2)
    assert stepcode.digest(len) is None  # a builtin has no code of its own
    bound = Calls().hit
    assert stepcode.digest(bound) == stepcode.digest(Calls.hit)


def test_the_code_digest_is_the_same_in_another_process(tmp_path: Path) -> None:
    (tmp_path / "steps_mod.py").write_text(
        "def step(x):\n"
        "    if x in {'alpha', 'beta', 'gamma', 'delta'}:\n"
        "        return [lambda: x, 1.5, None]\n"
        "    return x\n")
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import steps_mod; "
              "from stead import stepcode; print(stepcode.digest(steps_mod.step))")
    seen = {subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True,
                           capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip()
            for seed in ("1", "2", "3")}
    assert len(seen) == 1 and len(next(iter(seen))) == 16


def test_a_bad_changed_steps_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="changed_steps is one of 'warn', 'rerun', 'stop'"):
        stead.App("x", changed_steps="sometimes")




# -- real worker processes: a deploy changes the step, SIGKILL in between ----------------
_APP = '''
import os
import signal

import stead

app = stead.App("coded", changed_steps=os.environ["CHANGED_STEPS"])


def plan() -> str:
    return "{made}"


def die() -> None:
    if os.environ.get("DIE"):
        os.kill(os.getpid(), signal.SIGKILL)


@app.workflow()
async def check(run: stead.Run) -> str:
    made = await run.step("plan", plan)
    await run.step("die", die)
    return made
'''


def _worker(db_url: str, tmp: Path, made: str, *args: str, die: bool = False
            ) -> subprocess.CompletedProcess[str]:
    (tmp / "coded_app.py").write_text(_APP.format(made=made))
    env = {**os.environ, "PYTHONPATH": str(tmp), "CHANGED_STEPS": "rerun",
           **({"DIE": "1"} if die else {})}
    return subprocess.run(
        [sys.executable, "-m", "stead", "--db", db_url, "worker", "coded_app:app",
         "--poll", "0.05", "--heartbeat", "0.2", *args],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
async def test_a_deploy_that_changed_a_step_reruns_it_after_a_sigkill(
    store: stead.Store, db_url: str, tmp_path: Path,
) -> None:
    client = stead.Client(store)
    info = await client.start("check", version=1)
    first = _worker(db_url, tmp_path, "A", "--until-idle", die=True)
    assert first.returncode == -9, first.stderr[-2000:]
    second = _worker(db_url, tmp_path, "B", "--until-done", info.run_id, "--timeout", "120")
    assert second.returncode == 0, second.stderr[-2000:]
    assert await client.result(info.run_id, timeout=60) == "B"
    [resume] = await client.resumes(info.run_id)
    [entry] = resume.details.reran or []
    assert (entry["call"], entry["cause"], entry["done"]) == (
        "plan", StaleCause.CODE, StaleOutcome.RERUN)
    plans = [r for r in await client.journal(info.run_id)
             if r.kind == RecordKind.STEP and r.name == "plan"]
    assert [r.payload for r in plans] == ['"A"', '"B"']
