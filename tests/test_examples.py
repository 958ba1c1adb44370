"""Each example, run as a user runs it: `stead start`, `stead worker`, `stead
approve`, from a folder of their own, with the fake services' files there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stead.examples import ci_agent, services

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def _stead() -> list[str]:
    script = Path(sys.executable).with_name("stead")
    return [str(script)] if script.exists() else [sys.executable, "-m", "stead"]


class User:
    """Runs `stead --db ... ARGS` in `folder`, with no services folder set
    (so the examples use ./example-services)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.db = f"sqlite:///{folder}/stead.db"
        self.env = {k: v for k, v in os.environ.items()
                    if k not in (services.ENV, "STEAD_DATABASE_URL")}

    def __call__(self, *args: str) -> str:
        out = subprocess.run([*_stead(), "--db", self.db, *args], cwd=self.folder,
                             env=self.env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    def ledger(self, name: str) -> Any:
        return json.loads((self.folder / "example-services" / f"{name}.json").read_text())

    def show(self, run_id: str) -> Any:
        return json.loads(self("runs", "show", run_id, "--json"))


def test_the_examples_folder_is_the_package(tmp_path: Path) -> None:
    link = ROOT / "examples"
    assert link.is_symlink() and os.readlink(link) == "src/stead/examples"
    names = {p.name for p in link.iterdir() if p.suffix == ".py"}
    assert {"refund_agent.py", "ci_agent.py", "triage.py", "services.py"} <= names


def test_refund_agent_waits_for_approval_then_refunds_once(tmp_path: Path) -> None:
    user = User(tmp_path)
    app = "stead.examples.refund_agent:app"
    run_id = user("start", app, "refund_order", '["123", 4200]', "--task-id", "order-123",
                  "-q").strip()
    user("worker", app, "--until-idle", "--log-level", "warning")
    show = user.show(run_id)
    assert show["run"]["status"] == "waiting"
    assert not (tmp_path / "example-services" / "payments.json").exists()  # nothing paid yet

    messages = user.ledger("mailbox")["messages"]
    assert len(messages) == 1
    body = messages[0]["body"]
    assert body["bound"] == {"order_id": "123", "amount": 4200, "state_version": 1}
    approve = ["approve", run_id, "--wait", body["wait_id"], "--token", body["token"]]
    assert user(*approve).startswith("Accepted:")
    assert user(*approve).startswith("Duplicate:")  # clicked twice: one event
    user("worker", app, "--until-idle", "--log-level", "warning")

    show = user.show(run_id)
    run = show["run"]
    assert run["status"] == "completed"
    assert run["result"] == {"order_id": "123", "refunded": True, "refund": "rf_1",
                             "amount": 4200}
    payments = user.ledger("payments")
    assert [c["op"] for c in payments["calls"]] == ["refund"]
    assert len(payments["refunds"]) == 1
    assert len(user.ledger("model")["calls"]) == 1
    names = [r["name"] for r in show["journal"]]
    assert names.index("recheck_eligibility") > names.index("user_confirmation")
    # The order-123 rule: the accepted confirmation is a fact of the task before
    # eligibility is checked again, and that before the refund is sent.
    after_wait = show["journal"][len(names) - names[::-1].index("user_confirmation"):]
    assert [(r["kind"], r["name"]) for r in after_wait[:3]] == [
        ("state", "update"), ("step", "recheck_eligibility"), ("effect", "dispatch_refund")]
    assert after_wait[0]["payload"]["data"]["user_confirmation"] == "accepted"


def test_ci_agent_edits_the_repo_and_runs_ci_once(tmp_path: Path) -> None:
    user = User(tmp_path)
    app = "stead.examples.ci_agent:app"
    ci_agent.make_sample_repo(tmp_path / "repo")
    services.CI(tmp_path / "example-services").configure(runs_for=0.5)
    run_id = user("start", app, "fix_and_test", '["repo", "add() subtracts"]', "-q").strip()
    user("worker", app, "--until-idle", "--log-level", "warning")

    run = user.show(run_id)["run"]
    assert run["status"] == "completed", run
    assert run["result"]["ci_job"] == 471
    assert run["result"]["ci"] == "passed"
    assert "return a + b" in (tmp_path / "repo" / "calc.py").read_text()
    jobs = user.ledger("ci")["jobs"]
    assert list(jobs) == ["471"]


def test_triage_example_runs_to_completion(tmp_path: Path) -> None:
    user = User(tmp_path)
    app = "stead.examples.triage:app"
    ticket = {"id": 4711, "customer": "acme", "subject": "Charged twice", "body": "Twice."}
    run_id = user("start", app, "triage", json.dumps([ticket]), "-q").strip()
    user("worker", app, "--until-idle", "--log-level", "warning")
    run = user.show(run_id)["run"]
    assert run["status"] == "completed"
    assert run["result"] == {"ticket": 4711, "category": "billing", "queue": "billing",
                             "assignee": "dana", "priority": "high", "reply_id": "R-4711-1"}


def test_the_payment_service_refunds_once_per_idempotency_key(tmp_path: Path) -> None:
    where = tmp_path / "nested" / "services"
    services.Payments(where).refund("9", 100, idempotency_key="k")
    services.Payments(where).refund("9", 100, idempotency_key="k")
    assert len(services.Payments(where).refunds()) == 1
    assert len(services.Payments(where).calls()) == 2
    with pytest.raises(ValueError, match="reused for another refund"):
        services.Payments(where).refund("9", 200, idempotency_key="k")
