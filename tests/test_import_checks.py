"""Run exports from outside: `stead runs import` and `stead replay-check
--from` check every record of a file before anything of it is used. A corrupt
export (a gap in seq, seq -1, an unknown kind, a payload that is not JSON, a
NUL, a deep or non-UTF-8 or huge file) is one clear line naming the file,
stores nothing of its run, and the next file is read; the exit is 1 at the
end. A hypothesis fuzz mutates a real export and checks that an import never
stores a partial or corrupt run and never tracebacks."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import stead
from stead import exports
from stead.cli import main
from stead.records import Record, RunRow, StateRow, WaitRow
from stead.testing import replay_check
from tests import stress


def _app() -> stead.App:
    app = stead.App("imports")

    @app.workflow()
    async def order(run: stead.Run, item: str) -> Any:
        price = await run.step("price", lambda: {"item": item, "cents": 1200})
        run.now()
        approved = await (await run.wait("approval", bind={"item": item}))
        return {"price": price, "approved": approved}

    return app


async def _export(store: stead.Store) -> dict[str, Any]:
    """A real export, as JSON: a run that priced an item and waits for approval."""
    app = _app()
    client = stead.Client(store, app)
    run_id = (await client.start("order", "book")).run_id
    await stead.Worker(app, store).run_until_idle()
    return (await client.export_run(run_id)).to_json()


def _renamed(data: dict[str, Any], run_id: str) -> dict[str, Any]:
    """`data` as the export of a run `run_id` (its waits, and the journal's
    records of them, too): the same history, importable beside the original."""
    data = json.loads(json.dumps(data))
    data["run"]["run_id"] = run_id
    for w in data["waits"]:
        w["run_id"], w["wait_id"] = run_id, f"{w['wait_id']}-{run_id}"
        w["task_key"] = f"run:{run_id}"
    for r in data["journal"]:
        if r["kind"] == "wait":
            payload = json.loads(r["payload"])
            payload["wait_id"] = f"{payload['wait_id']}-{run_id}"
            r["payload"] = json.dumps(payload)
    return data


async def _nothing_of(store: stead.Store, run_id: str) -> None:
    with pytest.raises(stead.SteadError):
        await store.get_run(run_id)
    assert await store.load_journal(run_id) == []
    assert await store.list_waits(run_id=run_id) == []


# -- what is refused, and says so --------------------------------------------------
def _gap(d: dict[str, Any]) -> None:
    del d["journal"][1]


def _negative(d: dict[str, Any]) -> None:
    d["journal"][0]["seq"] = -1


def _unknown_kind(d: dict[str, Any]) -> None:
    d["journal"][0]["kind"] = "teleport"


def _payload_not_json(d: dict[str, Any]) -> None:
    d["journal"][0]["payload"] = "{not json"


def _input_not_args(d: dict[str, Any]) -> None:
    d["run"]["input"] = "[1, 2]"


def _input_no_kwargs(d: dict[str, Any]) -> None:
    d["run"]["input"] = '{"args": []}'


def _cut_nowhere(d: dict[str, Any]) -> None:
    d["journal"][1]["kind"], d["journal"][1]["payload"] = "cut", '{"call": "now"}'


def _deep_payload(d: dict[str, Any]) -> None:
    d["journal"][0]["payload"] = "[" * 600 + "]" * 600


def _nul_in_name(d: dict[str, Any]) -> None:
    d["journal"][-1]["name"] = "appro\x00val"


def _lone_surrogate(d: dict[str, Any]) -> None:
    d["journal"][0]["addr"] = "0\ud800"


def _long_run_id(d: dict[str, Any]) -> None:
    d["run"]["run_id"] = uuid.uuid4().hex * 100  # PostgreSQL's index refuses it


def _error_not_object(d: dict[str, Any]) -> None:
    d["journal"][0]["status"], d["journal"][0]["payload"] = "error", '"boom"'


def _bool_epoch(d: dict[str, Any]) -> None:
    d["journal"][0]["epoch"] = True


def _nan_time(d: dict[str, Any]) -> None:
    d["journal"][0]["at"] = float("nan")


def _unknown_status(d: dict[str, Any]) -> None:
    d["run"]["status"] = "zombie"


def _foreign_wait(d: dict[str, Any]) -> None:
    d["waits"][0]["run_id"] = "someone-else"


def _extra_field(d: dict[str, Any]) -> None:
    d["journal"][0]["extra"] = 1


CORRUPTIONS = {
    _gap: "seq must run 0, 1, 2",
    _negative: "seq is -1",
    _unknown_kind: "kind is 'teleport', not one of",
    _payload_not_json: "payload is not JSON",
    _input_not_args: "input is JSON list, not an object",
    _input_no_kwargs: "input is not {\"args\"",
    _cut_nowhere: "a cut whose payload does not say where it starts",
    _deep_payload: "nested deeper than 512",
    _nul_in_name: "name contains a NUL",
    _lone_surrogate: "addr contains a lone surrogate",
    _long_run_id: "run_id is 3200 characters long; at most 512",
    _error_not_object: "error whose payload is not an object",
    _bool_epoch: "epoch is True, not a whole number",
    _nan_time: "at is nan, not a time",
    _unknown_status: "status is 'zombie'",
    _foreign_wait: "belongs to run 'someone-else'",
    _extra_field: "unknown fields \\['extra'\\]",
}


@pytest.mark.parametrize("corrupt", list(CORRUPTIONS), ids=lambda f: f.__name__[1:])
async def test_a_corrupt_export_is_refused_naming_what_and_stores_nothing(
    store: stead.Store, corrupt: Any,
) -> None:
    data = _renamed(await _export(store), uuid.uuid4().hex)
    corrupt(data)
    with pytest.raises(stead.InvalidInput, match=CORRUPTIONS[corrupt]):
        stead.StoredRun.from_json(data, source="run.json")
    if corrupt is not _extra_field:  # a row built in code has no unknown field
        # A run built in code passes the same door: the store is never asked.
        with pytest.raises(stead.InvalidInput, match=CORRUPTIONS[corrupt]):
            await stead.Client(store).import_run(_unchecked(data))
    await _nothing_of(store, data["run"]["run_id"])


def _unchecked(data: dict[str, Any]) -> stead.StoredRun:
    """`data` as a `StoredRun` built without any check, as code could."""
    return stead.StoredRun(RunRow(**data["run"]), tuple(Record(**r) for r in data["journal"]),
                           tuple(WaitRow(**w) for w in data["waits"]),
                           None if data["state"] is None else StateRow(**data["state"]))


@pytest.mark.sqlite_only
async def test_a_history_built_in_code_with_a_cut_that_says_nowhere_is_corrupt_not_a_crash(
    store: stead.Store,
) -> None:
    data = await _export(store)
    _cut_nowhere(data)
    [replayed] = await replay_check(_app(), [_unchecked(data)])
    assert replayed.finding is not None and replayed.finding.kind == "corrupt"
    assert "its cut record at seq 1 does not say where the cut starts" in (
        replayed.finding.message)


async def test_a_valid_export_imports_whole_on_either_store(store: stead.Store) -> None:
    data = _renamed(await _export(store), uuid.uuid4().hex)
    stored = stead.StoredRun.from_json(data)
    info = await stead.Client(store).import_run(stored)
    assert info.run_id == data["run"]["run_id"] and info.status == "waiting"
    assert await store.load_journal(info.run_id) == list(stored.journal)


# -- files: bytes, size, depth; the command lines -------------------------------------
def _cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_import_names_each_bad_file_in_one_line_and_imports_the_others(
    tmp_path: Path,
) -> None:
    db = f"sqlite:///{tmp_path}/stead.db"
    data = asyncio.run(_exported(db))
    files = {}
    for name, change in (("good1", None), ("gap", _gap), ("good2", None)):
        d = _renamed(data, f"run-{name}")
        if change is not None:
            change(d)
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(d))
    (tmp_path / "latin1.json").write_bytes(b'{"format": "stead.run/1", "x": "caf\xe9"}')
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with open(tmp_path / "huge.json", "wb") as f:  # sparse: its size is all it has
        f.truncate(exports.MAX_BYTES + 1)
    paths = [str(files["good1"]), str(files["gap"]), str(tmp_path / "latin1.json"),
             str(tmp_path / "deep.json"), str(tmp_path / "huge.json"), str(files["good2"])]
    result = _cli("--db", db, "runs", "import", *paths)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.output.strip().splitlines()
    assert lines[0] == "imported run run-good1 (order@1, waiting)"
    assert lines[1].startswith(f"{files['gap']}: journal record 1 has seq 2")
    assert lines[2].startswith(f"{tmp_path / 'latin1.json'}: it is not UTF-8 text "
                               "(byte 35 is 0xe9)")
    assert lines[3].startswith(f"{tmp_path / 'deep.json'}: it is nested too deeply")
    assert lines[4].startswith(f"{tmp_path / 'huge.json'}: larger than 256 MB")
    assert lines[5] == "imported run run-good2 (order@1, waiting)"
    assert lines[6].startswith("4 of 6 file(s) not imported")
    assert all(line.endswith("(nothing of it was stored)") for line in lines[1:5])

    again = _cli("--db", db, "runs", "import", str(files["good1"]))
    assert again.exit_code == 1
    assert f"{files['good1']}: " in again.output and "already holds a run run-good1" in (
        again.output)
    asyncio.run(_only(db, {"run-good1", "run-good2", data["run"]["run_id"]}))


async def _exported(db: str) -> dict[str, Any]:
    store = await stead.open_store(db)
    try:
        return await _export(store)
    finally:
        await store.close()


async def _only(db: str, run_ids: set[str]) -> None:
    store = await stead.open_store(db)
    try:
        assert {r.run_id for r in await store.list_runs(limit=100)} == run_ids
    finally:
        await store.close()


def test_replay_check_reports_each_bad_file_in_one_line_and_goes_on(tmp_path: Path) -> None:
    data = asyncio.run(_exported(f"sqlite:///{tmp_path}/stead.db"))
    folder = tmp_path / "exports"
    folder.mkdir()
    (folder / "a-good.json").write_text(json.dumps(data))
    (folder / "b-bad.json").write_bytes(b"\xff\xfe")
    bad_kind = _renamed(data, "other")
    _unknown_kind(bad_kind)
    (folder / "c-kind.json").write_text(json.dumps(bad_kind))
    (folder / "d-deep.json").write_text("{\"a\":" * 50_000 + "1" + "}" * 50_000)
    global APP
    APP = _app()
    result = _cli("replay-check", f"{__name__}:APP", "--from", str(folder))
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit | None)
    lines = result.output.strip().splitlines()
    assert lines[0].startswith(f"{folder / 'b-bad.json'}: it is not UTF-8 text")
    assert lines[1].startswith(f"{folder / 'c-kind.json'}: journal record 0's kind")
    assert lines[2].startswith(f"{folder / 'd-deep.json'}: it is nested too deeply")
    assert lines[3] == "1 run(s) replayed, 0 the code cannot interpret"
    assert lines[4] == "3 file(s) could not be read"


APP: stead.App | None = None


# -- the fuzz ---------------------------------------------------------------------------
def _records(d: dict[str, Any]) -> list[Any]:
    return d["journal"]


@st.composite
def _mutation(draw: st.DrawFn, data: dict[str, Any]) -> bytes:
    """A mutated `data` as the bytes of a file."""
    d = json.loads(json.dumps(data))
    journal = _records(d)
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from([
            "drop", "duplicate", "swap", "kind", "status", "payload", "seq", "field",
            "deep", "type", "row"]))
        i = draw(st.integers(0, len(journal) - 1)) if journal else 0
        if not journal:
            break
        if what == "drop":
            del journal[i]
        elif what == "duplicate":
            journal.insert(i, dict(journal[i]))
        elif what == "swap":
            j = draw(st.integers(0, len(journal) - 1))
            journal[i], journal[j] = journal[j], journal[i]
        elif what == "kind":
            journal[i]["kind"] = draw(st.sampled_from(["step", "llm", "x", "", "STEP"]))
        elif what == "status":
            journal[i]["status"] = draw(st.sampled_from(["ok", "error", "nope"]))
        elif what == "payload":
            journal[i]["payload"] = draw(st.one_of(st.text(max_size=20), st.just('{"a":1}'),
                                                   st.integers()))
        elif what == "seq":
            journal[i]["seq"] = draw(st.one_of(st.integers(-3, 10), st.floats(), st.none()))
        elif what == "field":
            key = draw(st.sampled_from(sorted(journal[i])))
            if draw(st.booleans()):
                del journal[i][key]
            else:
                journal[i][key] = draw(st.one_of(st.text(max_size=5), st.integers(), st.none(),
                                                 st.lists(st.integers(), max_size=2)))
        elif what == "deep":
            n = draw(st.sampled_from([10, 600, 5000]))
            journal[i]["payload"] = "[" * n + "]" * n
        elif what == "row":  # the run's row or a wait's, not the journal
            row = d["run"] if draw(st.booleans()) or not d["waits"] else d["waits"][0]
            key = draw(st.sampled_from(sorted(row)))
            row[key] = draw(st.one_of(st.none(), st.integers(-2, 2**64), st.floats(),
                                      st.text(max_size=4), st.just("{}"), st.just("[]")))
        elif what == "type":
            d[draw(st.sampled_from(["run", "journal", "waits", "state"]))] = draw(
                st.one_of(st.integers(), st.text(max_size=3), st.none()))
            break
    text = json.dumps(d).encode()
    if draw(st.booleans()):  # bad bytes, truncation
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.binary(min_size=0, max_size=4)) + (
            text[at:] if draw(st.booleans()) else b"")
    return text


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    db = f"sqlite:///{tmp_path_factory.mktemp('fuzz')}/stead.db"
    return db, asyncio.run(_exported(db))


@settings(max_examples=stress.examples(80), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_import_never_stores_a_partial_or_corrupt_run_and_never_tracebacks(
    corpus: tuple[str, dict[str, Any]], tmp_path: Path, data: st.DataObject,
) -> None:
    db, export = corpus
    run_id = uuid.uuid4().hex
    body = data.draw(_mutation(_renamed(export, run_id)))
    path = tmp_path / f"{run_id}.json"
    path.write_bytes(body)
    result = _cli("--db", db, "runs", "import", str(path))
    assert result.exit_code in (0, 1), result.output
    event("imported" if result.exit_code == 0 else "refused")
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.exception)
    asyncio.run(_whole_or_nothing(db, path, run_id, result))


async def _whole_or_nothing(db: str, path: Path, run_id: str, result: Result) -> None:
    store = await stead.open_store(db)
    try:
        if result.exit_code == 0:
            stored = stead.StoredRun.read(path)  # what was stored passes the checks
            assert await store.load_journal(run_id) == list(stored.journal)
            assert len(await store.list_waits(run_id=run_id)) == len(stored.waits)
        else:
            [line, summary] = result.output.strip().splitlines()
            assert line.startswith(f"{path}") and "Traceback" not in result.output
            assert summary.startswith("1 of 1 file(s) not imported")
            await _nothing_of(store, run_id)
    finally:
        await store.close()
