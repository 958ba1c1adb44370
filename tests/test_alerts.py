"""The example alert rules (deploy/prometheus/stead-alerts.yml) are valid and
do what their unit tests say, by `promtool test rules`; and every metric a
rule or the Grafana dashboard (deploy/grafana/stead.json) names is one stead
exports (docs/reference/metrics.md, itself checked against a scrape by
tests/test_metrics.py). The rules firing against a real Prometheus scraping
real workers: tests/test_metrics_processes.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.test_metrics import documented

ROOT = Path(__file__).parent.parent
RULES = ROOT / "deploy" / "prometheus" / "stead-alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "stead.json"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: .ci/run installs the prometheus package")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


def test_the_alert_rules_pass_their_unit_tests() -> None:
    tool = promtool()
    check = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    tested = subprocess.run([tool, "test", "rules", "stead-alerts.test.yml"],
                            cwd=RULES.parent, capture_output=True, text=True, timeout=120)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def _named(expr: str) -> set[str]:
    """The stead metric names a PromQL expression reads (a histogram's
    _bucket, _sum and _count are its own name)."""
    return {re.sub(r"_(bucket|sum|count)$", "", n)
            for n in re.findall(r"\bstead_[a-z_]+", expr)}


def test_every_alert_is_tested_and_names_only_exported_metrics() -> None:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    tests = yaml.safe_load((RULES.parent / "stead-alerts.test.yml").read_text())["tests"]
    tested = {t["alertname"] for case in tests for t in case["alert_rule_test"]
              if t["exp_alerts"]}
    assert {r["alert"] for r in rules} == tested  # each one is shown to fire
    for rule in rules:
        assert _named(rule["expr"]), rule["alert"]
        assert _named(rule["expr"]) <= documented(), rule["alert"]


def test_every_dashboard_query_names_an_exported_metric() -> None:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 10
    for expr in exprs:
        named = _named(expr)
        assert named, expr
        assert named <= documented(), f"{expr}: {named - documented()} not exported"
