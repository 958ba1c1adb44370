"""Replay check before a deploy: the exported histories of every example
(src/stead/examples), replayed dry against the unchanged code (nothing to
report, `stead replay-check` exits 0) and against four changes made to each
workflow (a step inserted, a call removed, an argument changed, a return
type changed), each caught with its position and the calls expected and made."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import stead
from stead import codec
from stead.cli import main
from stead.examples import (
    anthropic_agent,
    broken,
    ci_agent,
    langgraph_refund,
    openai_agent,
    openai_agents_refund,
    policy_agent,
    pydantic_ai_refund,
    refund_agent,
    services,
    triage,
)
from stead.records import RecordKind, RecordStatus
from stead.testing import assert_replays, load_exports, replay_check
from stead.testing.examples import TICKET

CALLS = (RecordKind.STEP, RecordKind.EFFECT, RecordKind.LLM)
MUTATIONS = ("inserted_step", "removed_call", "changed_argument", "changed_return_type")


# -- the histories ----------------------------------------------------------------------
async def _finish(client: stead.Client, app: stead.App, run_id: str) -> None:
    assert await stead.Worker(app, client.store).run_until_done([run_id], timeout=30)


async def _record(folder: Path) -> dict[str, stead.StoredRun]:
    """Run every example to its end (and the refund agent also to its wait),
    as a user would, and export each history."""
    store = await stead.open_store(f"sqlite:///{folder}/stead.db")
    where = folder / "example-services"
    exported: dict[str, stead.StoredRun] = {}
    try:
        client = stead.Client(store, refund_agent.app)
        run = await client.start("refund_order", "123", 4200, task_id="order-123")
        await _finish(client, refund_agent.app, run.run_id)
        exported["refund_agent-waiting"] = await client.export_run(run.run_id)
        [message] = services.Mailbox(where).messages()[-1:]
        await refund_agent.approve(client, run.run_id, message, event_id="click-1")
        await _finish(client, refund_agent.app, run.run_id)
        exported["refund_agent"] = await client.export_run(run.run_id)

        ci_agent.make_sample_repo(folder / "repo")
        services.CI(where).configure(runs_for=0.2)
        client = stead.Client(store, ci_agent.app)
        run = await client.start("fix_and_test", str(folder / "repo"), "add() subtracts")
        await _finish(client, ci_agent.app, run.run_id)
        exported["ci_agent"] = await client.export_run(run.run_id)

        client = stead.Client(store, triage.app)
        run = await client.start("triage", TICKET)
        await _finish(client, triage.app, run.run_id)
        exported["triage"] = await client.export_run(run.run_id)

        client = stead.Client(store, broken.app)
        run = await client.start("refund_in_a_step", "456", 100)
        await _finish(client, broken.app, run.run_id)
        exported["broken"] = await client.export_run(run.run_id)

        client = stead.Client(store, policy_agent.app)
        run = await client.start("refund", "123", 1000,
                                 intent=policy_agent.intent(5000, "refunds@7"))
        await _finish(client, policy_agent.app, run.run_id)
        await client.deliver(run.run_id, event_id="ok-1", kind="approval",
                             bind={"order_id": "123"}, payload={"approved": True})
        await _finish(client, policy_agent.app, run.run_id)
        exported["policy_agent"] = await client.export_run(run.run_id)

        for name, module in (("openai_agent", openai_agent), ("anthropic_agent",
                                                              anthropic_agent)):
            client = stead.Client(store, module.app)
            run = await client.start("ask", "Weather in Paris?")
            await _finish(client, module.app, run.run_id)
            exported[name] = await client.export_run(run.run_id)

        # The SDK integrations' agents, up to the approval they wait for.
        for name, module in (("openai_agents_refund", openai_agents_refund),
                             ("pydantic_ai_refund", pydantic_ai_refund),
                             ("langgraph_refund", langgraph_refund)):
            client = stead.Client(store, module.app)
            run = await client.start("refund_order", "123")
            await _finish(client, module.app, run.run_id)
            exported[name] = await client.export_run(run.run_id)
    finally:
        await store.close()
    return exported


@pytest.fixture(scope="module")
def histories(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder of exports, one per example history (`stead runs export`)."""
    folder = tmp_path_factory.mktemp("histories")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(services.ENV, str(folder / "example-services"))
        mp.setenv("STEAD_SECRET", "replay-check-tests")
        # The coding agent attaches its repository as a workspace: allow this folder.
        mp.setenv("STEAD_WORKSPACE_ROOT", str(folder))
        mp.setenv("STEAD_WORKSPACE_DIR", str(folder / "workspaces"))
        exported = asyncio.run(_record(folder))
    out = folder / "exports"
    out.mkdir()
    for name, stored in exported.items():
        assert stored.run.status in ("completed", "waiting"), (name, stored.run.error)
        (out / f"{name}.json").write_text(stored.dumps())
    yield out


APPS = {"refund_agent": refund_agent.app, "ci_agent": ci_agent.app, "triage": triage.app,
        "broken": broken.app, "policy_agent": policy_agent.app,
        "openai_agent": openai_agent.app, "anthropic_agent": anthropic_agent.app,
        "openai_agents_refund": openai_agents_refund.app,
        "pydantic_ai_refund": pydantic_ai_refund.app, "langgraph_refund": langgraph_refund.app}


def _app_of(name: str) -> stead.App:
    return APPS[name.split("-")[0]]


# -- the changed code ----------------------------------------------------------------------
@dataclasses.dataclass
class Changed:
    """A return type no recorded result fits."""

    changed_field: int


def _retyped(fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):
        async def changed_async(*args: Any, **kwargs: Any) -> Changed:
            return Changed(**await fn(*args, **kwargs))

        return changed_async

    def changed(*args: Any, **kwargs: Any) -> Changed:
        return Changed(**fn(*args, **kwargs))

    return changed


def _nothing() -> None:
    return None


class Mutant:
    """The run a changed workflow sees: its `at`-th journaled call (steps,
    effects and model calls, counted in order) is changed by `mutation`."""

    def __init__(self, run: stead.Run, mutation: str, at: int, recorded: Any) -> None:
        self._run, self._mutation, self._at, self._recorded = run, mutation, at, recorded
        self._calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._run, name)

    async def _call(self, method: str, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        n, self._calls = self._calls, self._calls + 1
        if n == self._at:
            if self._mutation == "inserted_step":
                await self._run.step("inserted", _nothing)
            elif self._mutation == "removed_call":
                return self._recorded
            elif self._mutation == "changed_argument":
                kwargs = {**kwargs, "changed": True} if method == "llm" else kwargs
                args = args if method == "llm" else (*args, "changed")
            elif self._mutation == "changed_return_type":
                fn = _retyped(fn)
        return await getattr(self._run, method)(name, fn, *args, **kwargs)

    async def step(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await self._call("step", name, fn, *args, **kwargs)

    async def effect(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await self._call("effect", name, fn, *args, **kwargs)

    async def llm(self, name: str, model: Any, *args: Any, **kwargs: Any) -> Any:
        return await self._call("llm", name, model, *args, **kwargs)


def _target(stored: stead.StoredRun) -> tuple[int, Any]:
    """The call to change: the first step or effect, by its position among
    the journaled calls, and the value it returned."""
    addrs: list[str] = []
    for r in stored.journal:
        if r.kind in CALLS and r.addr not in addrs:
            addrs.append(r.addr)
    first = next(r for r in stored.journal if r.kind in (RecordKind.STEP, RecordKind.EFFECT))
    done = [r for r in stored.journal if r.addr == first.addr and r.status == RecordStatus.OK]
    value = codec.loads(done[-1].payload)
    if first.kind == RecordKind.EFFECT:
        value = value["result"]
    return addrs.index(first.addr), value


def mutated(app: stead.App, stored: stead.StoredRun, mutation: str) -> stead.App:
    """`app` with every workflow changed by `mutation` at the call `_target` picks."""
    at, recorded = _target(stored)
    changed = stead.App(app.name, tools=app.tools, matchers=app.matchers)
    for wf in app.workflows:
        def wrap(fn: Any) -> Any:
            @functools.wraps(fn)
            async def body(run: stead.Run, *args: Any, **kwargs: Any) -> Any:
                return await fn(Mutant(run, mutation, at, recorded), *args, **kwargs)

            return body

        changed.workflow(name=wf.name, version=wf.version)(wrap(wf.fn))
    return changed


# -- the checks ----------------------------------------------------------------------------
def test_every_example_left_a_history(histories: Path) -> None:
    names = {p.stem.split("-")[0] for p in histories.glob("*.json")}
    examples = {p.stem for p in Path(ci_agent.__file__).parent.glob("*.py")
                if p.stem not in ("__init__", "services", "scripted_api")}
    assert names == examples


async def test_unchanged_apps_interpret_every_history(histories: Path) -> None:
    for stored in load_exports(histories):
        [result] = await replay_check(_app_of(_name(histories, stored)), [stored])
        assert result.finding is None, result.finding
        assert result.reused > 0


def _name(folder: Path, stored: stead.StoredRun) -> str:
    for path in folder.glob("*.json"):
        if json.loads(path.read_text())["run"]["run_id"] == stored.run.run_id:
            return path.stem
    raise AssertionError(stored.run.run_id)


@pytest.mark.parametrize("mutation", MUTATIONS)
async def test_a_change_is_caught_in_the_history_of_every_example(
    histories: Path, mutation: str,
) -> None:
    for path in sorted(histories.glob("*.json")):
        stored = stead.StoredRun.loads(path.read_text())
        app = mutated(_app_of(path.stem), stored, mutation)
        [result] = await replay_check(app, [stored])
        finding = result.finding
        assert finding is not None, f"{mutation} not caught in {path.stem}"
        assert finding.kind == "incompatible", finding
        assert finding.expected is not None and finding.actual is not None, finding
        line = finding.line()
        assert stored.run.run_id in line and "expected" in line
        if mutation in ("inserted_step", "changed_argument", "removed_call"):
            assert finding.addr is not None and finding.seq is not None, finding
        if mutation == "inserted_step":
            assert "'inserted'" in finding.actual
        if mutation == "changed_argument":
            assert "other arguments" in finding.actual
        if mutation == "changed_return_type":
            assert "Changed" in finding.actual


def test_the_pytest_helper_fails_naming_the_run(histories: Path) -> None:
    stored = stead.StoredRun.loads((histories / "triage.json").read_text())
    assert_replays(triage.app, [stored])
    with pytest.raises(AssertionError, match=stored.run.run_id):
        assert_replays(mutated(triage.app, stored, "inserted_step"), [stored])


MUTANT: stead.App | None = None  # what the command line below loads


def test_replay_check_exits_0_on_the_unchanged_app_and_1_on_a_changed_one(
    histories: Path, tmp_path: Path,
) -> None:
    global MUTANT
    runner = CliRunner()
    for name in ("refund_agent", "ci_agent", "triage"):
        folder = tmp_path / name
        folder.mkdir()
        for path in histories.glob(f"{name}*.json"):
            (folder / path.name).write_text(path.read_text())
        ok = runner.invoke(main, ["replay-check", f"stead.examples.{name}:app",
                                  "--from", str(folder)])
        assert ok.exit_code == 0, ok.output
        assert "the code cannot interpret" in ok.output and ", 0 the code" in ok.output
        stored = load_exports(folder)[0]
        MUTANT = mutated(APPS[name], stored, "removed_call")
        bad = runner.invoke(main, ["replay-check", f"{__name__}:MUTANT",
                                   "--from", str(folder)])
        assert bad.exit_code == 1, bad.output
        assert stored.run.run_id in bad.output and "expected" in bad.output


def test_replay_check_reads_the_live_runs_of_a_database(tmp_path: Path) -> None:
    runner = CliRunner(env={"STEAD_SECRET": "replay-check-tests",
                            services.ENV: str(tmp_path / "example-services")})
    db = f"sqlite:///{tmp_path}/stead.db"
    started = runner.invoke(main, ["--db", db, "start", "stead.examples.refund_agent:app",
                                   "refund_order", '["123", 4200]', "--task-id", "order-123",
                                   "-q"])
    assert started.exit_code == 0, started.output
    run_id = started.output.strip()
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        worked = runner.invoke(main, ["--db", db, "worker", "stead.examples.refund_agent:app",
                                      "--until-done", run_id, "--timeout", "30"])
    finally:
        os.chdir(cwd)
    assert worked.exit_code == 0, worked.output
    ok = runner.invoke(main, ["--db", db, "replay-check", "stead.examples.refund_agent:app"])
    assert ok.exit_code == 0 and "1 run(s) replayed, 0" in ok.output, ok.output
    exported = runner.invoke(main, ["--db", db, "runs", "export", run_id])
    assert exported.exit_code == 0
    assert json.loads(exported.output)["run"]["run_id"] == run_id
    other = f"sqlite:///{tmp_path}/other.db"
    (tmp_path / "run.json").write_text(exported.output)
    imported = runner.invoke(main, ["--db", other, "runs", "import", str(tmp_path / "run.json")])
    assert imported.exit_code == 0 and run_id in imported.output, imported.output
    again = runner.invoke(main, ["--db", other, "runs", "import", str(tmp_path / "run.json")])
    assert again.exit_code != 0 and "already holds" in again.output
    shown = runner.invoke(main, ["--db", other, "runs", "show", run_id])
    assert shown.exit_code == 0 and "user_confirmation" in shown.output, shown.output
    # The task state came along (the task had none in the other database).
    async def facts() -> stead.Facts:
        store = await stead.open_store(other)
        try:
            return await stead.Client(store).task_state("order-123")
        finally:
            await store.close()

    assert asyncio.run(facts()).data["status"] == "awaiting_user_confirmation"
