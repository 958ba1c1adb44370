"""The bench's many-workers mode (`python -m bench --fleet`, bench/fleet.py)
at a tiny scale, so that it keeps working: real worker processes on a fresh
PostgreSQL database drain a backlog, one is SIGKILLed mid-load and its runs
are taken over, a small simulated fleet runs over a window, and the report
renders."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from bench import fleet, runner

from tests import pg

TINY = fleet.Sizes(processes=2, concurrency=2, runs=30, recovery_runs=150, fleet=(3,),
                   fleet_processes=2, fleet_concurrency=2, warmup=0.5, window=3.0,
                   backlog_rate=100, reps=1)


@pytest.fixture
def admin(pg_keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench makes its databases on the tests' server."""
    pg.require()
    monkeypatch.setattr(runner, "PG_ADMIN", pg.URL)


def test_the_fleet_mode_measures_a_tiny_fleet(admin: None, tmp_path: Path) -> None:
    found = fleet.measure(TINY, lambda _text: None)
    rep = found["reps"][0]

    drained = rep["drain"]
    # Every run's every step ran live once, and the claims add up to the runs.
    assert len(drained["step_ms"]) == TINY.runs * fleet.STEPS
    assert sum(drained["claimed"]) == TINY.runs
    assert len(drained["claimed"]) == TINY.processes
    assert 1 / TINY.processes <= drained["jain"] <= 1
    assert drained["runs_per_s"] > 0
    assert drained["connections"] >= TINY.processes  # each worker holds at least one

    # The runs the killed worker held were each taken over by the other.
    recovery = rep["recovery"]
    assert recovery["resumed"] == recovery["held"]
    if recovery["held"]:
        assert 0 < recovery["first_s"] <= recovery["all_s"] < 60
    else:
        assert math.isnan(recovery["first_s"])

    cell = rep["sweep"][3]
    assert "failed" not in cell, cell
    assert cell["workers"] == 3  # over 2 processes: 2 and 1
    assert cell["claims_per_s"] > 0 and cell["claim_p50"] > 0
    assert cell["runs_per_s"] > 0

    info = {"nproc": 2, "cpu": "test", "stead_commit": "test", "postgres": None}
    text = fleet.markdown(found, info, "python -m bench.fleet")
    assert text.startswith(fleet.BEGIN) and text.endswith(fleet.END)
    assert "| 3 |" in text and "Hatchet" in text and "DBOS" in text
