"""`stead demo` end to end: real worker processes, a real SIGKILL, a resume."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import stead
from stead.cli import main

pytestmark = pytest.mark.slow


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stead", "demo", *args],
                          capture_output=True, text=True, timeout=120)


def test_demo_survives_a_sigkill_resumes_and_passes_its_checks() -> None:
    out = demo()
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    # worker A ran the first steps and died mid-step
    assert "A |   step load_customer: acme, plan pro" in text
    assert "A |   llm classify: asking the model" in text
    assert "worker A is dead (SIGKILL); the journal holds 4 acknowledged record(s): " \
           "step load_customer, llm classify, now, step assign" in text
    # worker B did only what was left, and the model was not asked again
    b_lines = [ln for ln in text.splitlines() if ln.startswith("    B |")]
    assert any("step draft_reply: reply drafted" in ln for ln in b_lines)
    assert any("step post_reply: posted R-4711-1" in ln for ln in b_lines)
    assert not any("load_customer" in ln or "classify" in ln or "assign" in ln
                   for ln in b_lines if "|   " in ln)
    assert "resumed by worker-B at epoch 2 from seq 4, 4 record(s) reused" in text
    # the timeline and the resume record
    assert "status    completed" in text
    assert "-- resumed by worker-B at epoch 2: 4 record(s) above reused --" in text
    assert re.search(r"epoch 2  by worker-B  at \+\S+  from seq 4  code triage@1  "
                     r"reused 4 record\(s\)", text)
    # every check passed
    checks = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("[")
              and ln.strip()[1:3] in ("ok", "FA")]
    assert len(checks) == 8 and all(c.startswith("[ok]") for c in checks), checks
    assert "all 8 checks passed" in text
    assert "stead demo --keep DIR" in text  # the hint to keep the database


def test_demo_keep_leaves_a_database_runs_show_can_read(tmp_path: Path) -> None:
    keep = tmp_path / "kept demo"  # a space in the path survives the URL
    out = demo("--keep", str(keep))
    assert out.returncode == 0, out.stdout + out.stderr
    hint = re.search(r"stead --db (\S+) runs show ([0-9a-f]{32})", out.stdout)
    assert hint is not None, out.stdout
    db_url, run_id = hint.groups()
    assert (keep / "stead.db").exists()
    assert (keep / "worker-A.log").read_text().count("killed (SIGKILL) mid-step") == 1

    shown = CliRunner().invoke(main, ["--db", db_url, "runs", "show", run_id])
    assert shown.exit_code == 0, shown.output
    assert "status    completed" in shown.output
    assert "resumes (1)" in shown.output

    data = json.loads(
        CliRunner().invoke(main, ["--db", db_url, "runs", "show", run_id, "--json"]).output
    )
    assert [(r["name"], r["epoch"]) for r in data["journal"]] == [
        ("load_customer", 1), ("classify", 1), ("now", 1), ("assign", 1),
        ("draft_reply", 2), ("post_reply", 2),
    ]
    assert [(r["epoch"], r["worker_id"], r["from_seq"], r["reused"])
            for r in data["resumes"]] == [(2, "worker-B", 4, 4)]
    assert data["run"]["result"] == {"ticket": 4711, "category": "billing", "queue": "billing",
                                     "assignee": "dana", "reply_id": "R-4711-1"}

    # a second demo in the same folder works next to the first
    again = demo("--keep", str(keep))
    assert again.returncode == 0, again.stdout + again.stderr
    listed = CliRunner().invoke(main, ["--db", db_url, "runs", "ls", "--json"])
    assert [r["status"] for r in json.loads(listed.output)] == ["completed", "completed"]


def test_demo_refuses_a_folder_with_a_live_run_of_its_ticket(tmp_path: Path) -> None:
    from stead import demo as demo_app

    async def leave_a_live_run() -> str:
        store = await stead.open_store(f"sqlite:///{tmp_path}/stead.db")
        try:
            info = await stead.Client(store, demo_app.app).start(
                demo_app.triage, demo_app.TICKET, str(tmp_path), task_id="ticket-4711"
            )
            return info.run_id
        finally:
            await store.close()

    run_id = asyncio.run(leave_a_live_run())
    out = demo("--keep", str(tmp_path))
    assert out.returncode == 1
    assert f"a live run {run_id} of ticket-4711 is left from an earlier demo" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr
