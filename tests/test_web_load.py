"""The webhook under 1,000 concurrent deliveries on loopback, served by
`stead ui` in its own process: each wait accepts exactly one event, every
other delivery is a Duplicate or already_consumed. The same code, timed, is
`python -m bench.webhook` (bench/RESULTS.md)."""

from __future__ import annotations

import pytest
from bench import webhook

pytestmark = pytest.mark.slow


async def test_one_accepted_per_wait_under_a_thousand_concurrent_deliveries(
    db_url: str,
) -> None:
    found = await webhook.measure(db_url, waits=100, per_wait=10)
    assert found["deliveries"] == 1000
    assert len(found["verdicts"]) == 100
    for wait_id, verdicts in found["verdicts"].items():
        assert verdicts.get("accepted") == 1, (wait_id, verdicts)
        others = {k: v for k, v in verdicts.items() if k != "accepted"}
        assert set(others) <= {"duplicate", "already_consumed"}, (wait_id, verdicts)
        assert sum(others.values()) == 9
