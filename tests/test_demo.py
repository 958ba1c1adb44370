"""`stead demo` end to end, as a person runs it: real worker processes, a real
SIGKILL, a resume, and the demo's own checks (it exits non-zero if one fails)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from stead.cli import main
from stead.demos.narrate import Checks

pytestmark = pytest.mark.slow


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stead", "demo", *args],
                          capture_output=True, text=True, timeout=120)


def _lines(text: str, who: str) -> list[str]:
    """What worker `who` journaled, as the demo narrated it."""
    return [ln.split("|", 1)[1].strip() for ln in text.splitlines()
            if ln.startswith(f"    {who} | ")]


def _checks(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines()
            if ln.strip().startswith(("[ok]", "[FAIL]"))]


def test_refund_demo_tells_the_order_123_story_and_passes_its_checks() -> None:
    out = demo()
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    # 1. worker A: the model decides, eligibility, state, the wait, the link
    a = _lines(text, "A")
    assert a[0].startswith("llm    decide") and "calls check_eligibility" in a[0]
    assert [ln.split()[1] for ln in a] == [
        "decide", "check_eligibility", "get", "update", "user_confirmation",
        "send_confirmation_link", "send_confirmation_link"]
    assert 'task state  v1 {"status":"awaiting_user_confirmation","refund_dispatched":false}' \
        in text
    assert 'bound to {"order_id":"123","amount":4200,"state_version":1}' in text
    assert "the run waits (status waiting): it holds no lease and no worker" in text
    # 2.-3. the deploy, then the answers while no worker runs
    assert "worker A is gone (exit -9); no worker runs" in text
    assert "a tampered copy (amount 9000):     Rejected: bound value mismatch (amount)" in text
    assert "the approval (event approval-1):  Accepted" in text
    # 4. worker B: only what was left; the model is not asked again
    b = _lines(text, "B")
    assert [ln.split()[1] for ln in b] == [
        "user_confirmation", "update", "recheck_eligibility", "dispatch_refund",
        "dispatch_refund", "update"]
    assert 'version 2: {"status":"confirmed"' in b[1]
    assert "event approval-1 arrived" in b[0]
    assert 'done: {"refund":"rf_1","order_id":"123","amount":4200}' in b[4]
    # 5. redelivery
    assert "Duplicate (this event was accepted before): nothing happens twice" in text
    # 6. the timeline, the resume record, the payment service's own ledger
    assert "status    completed" in text
    assert "-- resumed by worker-B at epoch 2: 7 record(s) above reused --" in text
    assert re.search(r"resume record\n  worker    worker-B, epoch 2\n  from seq  7 ", text)
    ledger = text.split("the payment service's own ledger", 1)[1]
    assert len(re.findall(r"^  call    refund ", ledger, re.M)) == 1
    assert "\n  1 refund(s)\n" in ledger
    checks = _checks(text)
    assert len(checks) == 12 and all(c.startswith("[ok]") for c in checks), checks
    assert "all 12 checks passed" in text
    assert "[ok] the order-123 rule: the accepted confirmation was committed" in text
    assert "stead demo --keep DIR" in text


def test_refund_demo_keep_leaves_what_runs_show_and_the_ledger_can_read(tmp_path: Path) -> None:
    keep = tmp_path / "kept demo"  # a space in the path survives the URL
    out = demo("--keep", str(keep))
    assert out.returncode == 0, out.stdout + out.stderr
    hint = re.search(r"stead --db (\S+) runs show ([0-9a-f]+)\b", out.stdout)
    assert hint is not None, out.stdout
    db_url, run_id = hint.groups()
    assert (keep / "stead.db").exists() and (keep / "worker-A.log").exists()
    payments = json.loads((keep / "services" / "payments.json").read_text())
    assert len(payments["refunds"]) == 1

    shown = CliRunner().invoke(main, ["--db", db_url, "runs", "show", run_id])
    assert shown.exit_code == 0, shown.output
    assert "status    completed" in shown.output and "resumes (1)" in shown.output
    data = json.loads(
        CliRunner().invoke(main, ["--db", db_url, "runs", "show", run_id, "--json"]).output)
    epochs = {(r["name"], r["status"]): r["epoch"] for r in data["journal"]}
    assert epochs[("decide", "ok")] == 1 and epochs[("check_eligibility", "ok")] == 1
    assert epochs[("recheck_eligibility", "ok")] == 2 and epochs[("dispatch_refund", "ok")] == 2
    assert [(r["epoch"], r["worker_id"]) for r in data["resumes"]] == [(2, "worker-B")]
    assert data["run"]["result"]["refunded"] is True

    again = demo("--keep", str(keep))  # a folder that holds a demo is not reused
    assert again.returncode == 1
    assert "is not empty; give --keep a new or empty folder" in again.stdout
    assert "Traceback" not in again.stdout + again.stderr


def test_ci_demo_asks_ci_about_job_471_and_never_submits_a_second_job() -> None:
    out = demo("ci")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    a, b = _lines(text, "A"), _lines(text, "B")
    assert [ln.split()[1] for ln in a] == [
        "repo", "read_repo", "read_repo", "plan_fix", "edit_file", "edit_file", "repo",
        "run_tests", "run_tests", "write_message", "run_ci", "run_ci"]
    assert a[-1].endswith("accepted outside as 471")
    assert "worker A is gone (exit -9), and so is machine-A/repo" in text
    assert b == ['effect run_ci                 done: {"job":471,"status":"passed"}']
    assert "B asked CI about job 471: pending" in text
    assert "history  intent > accepted > done" in text
    assert "classes   pending_external 1, reuse 5" in text
    assert "restored  workspace repo, snapshot at seq 6" in text
    assert "/machine-B/.stead-workspaces/" in text
    assert "the restored repository on machine B: calc.py says return a + b" in text
    ledger = text.split("the CI service's own ledger", 1)[1].split("[6]", 1)[0]
    assert len(re.findall(r"^  submit  ", ledger, re.M)) == 1
    assert "-> job 471  from worker-A" in ledger and "1 job(s): 471 passed" in ledger
    d = _lines(text, "D")
    assert [ln.split()[1] for ln in d[:3]] == ["cut", "run_tests", "run_tests"]
    assert "test runs: under numpy==2.1.0 by worker-C, under numpy==2.2.0 by worker-D" in text
    assert "the resume record: rerun run_tests, its fingerprint changed: files.uv.lock: " in text
    checks = _checks(text)
    assert len(checks) == 14 and all(c.startswith("[ok]") for c in checks), checks
    assert "[ok] the edit's snapshot rode in edit_file's own commit" in text


def test_triage_demo_survives_a_sigkill_mid_step() -> None:
    out = demo("triage")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "A |   step load_customer: acme, plan pro" in text
    assert "A |   llm classify: asking the model" in text
    assert "worker A is dead (SIGKILL); the journal holds 4 acknowledged record(s): " \
           "step load_customer, llm classify, now, step assign" in text
    b_lines = [ln for ln in text.splitlines() if ln.startswith("    B |   ")]
    assert any("step draft_reply: reply drafted" in ln for ln in b_lines)
    assert any("step post_reply: posted R-4711-1" in ln for ln in b_lines)
    assert not any(s in ln for ln in b_lines for s in ("load_customer", "classify", "assign"))
    assert re.search(r"epoch 2  by worker-B  at \+\S+  from seq 4  code triage@1  "
                     r"reused 4 record\(s\)", text)
    checks = _checks(text)
    assert len(checks) == 8 and all(c.startswith("[ok]") for c in checks), checks
    assert "stead demo triage --keep DIR" in text


def test_demo_help_names_the_stories_and_the_model_option() -> None:
    out = CliRunner().invoke(main, ["demo", "--help"])
    assert out.exit_code == 0, out.output
    for word in ("refund", "ci", "triage", "--keep", "--model", "scripted"):
        assert word in out.output
    bad = CliRunner().invoke(main, ["demo", "payroll"])
    assert bad.exit_code == 1 and "payroll" in bad.output


def test_a_failed_check_is_reported_and_makes_the_demo_fail() -> None:
    said: list[str] = []
    checks = Checks(said.append)
    checks.check(True, "the refund went out once")
    checks.check(False, "the model was asked once")
    assert checks.report() is False
    assert "  [FAIL] the model was asked once" in said
    assert "1 of 2 checks FAILED" in said[-1]


def test_policy_demo_tells_the_loop_story_a_policy_change_a_decision_a_lapse_a_renewal(
) -> None:
    out = demo("policy")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "worker A is gone (exit -9)" in text
    assert "run paused: policy refunds@8 paused the run before llm 'propose': the refund " \
           "limit is now 1000 (refunds@8); the grant allows 5000 (refunds@7)" in text
    assert "the model was asked 0 time(s); the payment service's ledger: 0 refund(s)" in text
    assert "run paused before its next model call: every grant of the run expired (the " \
           "last, for 'dispatch_refund'" in text
    b = _lines(text, "B")
    assert [ln.split()[:2] for ln in b] == [
        ["wait", "approval"], ["llm", "propose"], ["policy", "dispatch_refund"],
        ["effect", "dispatch_refund"], ["effect", "dispatch_refund"]]
    assert 'the model calls dispatch_refund(order_id="123", amount=1000)' in b[1]
    assert 'policy_version: ["refunds@7", "refunds@8"]' in text
    assert "the payment service's own ledger: 1 refund(s) [1000]" in text
    checks = _checks(text)
    assert len(checks) == 9 and all(line.startswith("[ok]") for line in checks), checks
