"""The SDK integrations' examples, run as a user runs them (`stead start`,
`stead worker`, `stead approve`), offline, with the fake services' files in
the user's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_examples import ROOT, User

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("module", "approve", "record"), [
    ("openai_agents_refund", ["--wait", "WAIT"], "refund"),
    ("pydantic_ai_refund", ["--kind", "approve", "--payload", '{"approvals": {"call_1": true}}'],
     "refund"),
    ("langgraph_refund", ["--wait", "WAIT"], "node refund"),
])
def test_the_example_refunds_once_after_an_approval(
    tmp_path: Path, module: str, approve: list[str], record: str,
) -> None:
    # An integration's whole example, crash check included, on one screen.
    assert len((ROOT / "examples" / f"{module}.py").read_text().splitlines()) <= 45
    user = User(tmp_path)
    app = f"stead.examples.{module}:app"
    run_id = user("start", app, "refund_order", '["123"]', "-q").strip()
    user("worker", app, "--until-idle", "--log-level", "warning")
    assert user.show(run_id)["run"]["status"] == "waiting"
    assert not (tmp_path / "example-services" / "payments.json").exists()
    [message] = user.ledger("mailbox")["messages"]
    body = message["body"]
    args = [body["wait_id"] if a == "WAIT" else a for a in approve]
    assert user("approve", run_id, *args, "--token", body["token"]).startswith("Accepted:")
    user("worker", app, "--until-idle", "--log-level", "warning")

    show = user.show(run_id)
    assert show["run"]["status"] == "completed", show["run"]
    assert show["run"]["result"] == "Done: rf_1"
    assert len(user.ledger("payments")["refunds"]) == 1
    assert record in [r["name"] for r in show["journal"]]
