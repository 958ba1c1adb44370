"""The example alert rules firing for real: Prometheus (Debian's package)
scrapes two `stead worker --metrics-port 0` processes on loopback; one is
SIGKILLed while an effect is in flight, the other takes the run over and
stops it as outcome_unknown. Prometheus's own API then shows
SteadWorkersDying and SteadEffectOutcomeUnknown firing, and the latter
cleared once `stead reconcile` decided. The rules are deploy/prometheus's,
their `for:` durations cut to 0 s so that the test need not wait minutes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import stead
from tests import stress
from tests.test_alerts import RULES

ROOT = Path(__file__).parent.parent
DEADLINE = 60.0 * stress.slow()

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Fleet:
    """Worker processes, and the Prometheus that scrapes them."""

    def __init__(self, tmp: Path, db_url: str) -> None:
        self.tmp, self.db_url = tmp, db_url
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.env = {**os.environ, "STEAD_DATABASE_URL": db_url, "PYTHONUNBUFFERED": "1",
                    "PYTHONPATH": str(ROOT), "METRICS_GATE": str(tmp / "gate"),
                    "METRICS_SENDING": str(tmp / "sending")}

    def start(self, argv: list[str], name: str) -> subprocess.Popen[bytes]:
        log = self.tmp / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                    cwd=self.tmp)
        self.procs.append((proc, log))
        return proc

    def worker(self, name: str) -> int:
        """Start a worker; the port it serves its metrics on."""
        self.start([sys.executable, "-m", "stead", "worker", "tests.metrics_app:app",
                    "--metrics-port", "0", "--heartbeat", "1", "--lease", "5",
                    "--worker-id", name], name)
        log = self.tmp / f"{name}.log"
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            found = re.search(r"/healthz and /readyz on http://127\.0\.0\.1:(\d+)",
                              log.read_text(errors="replace"))
            if found:
                return int(found.group(1))
            time.sleep(0.1)
        raise AssertionError(f"worker {name} did not serve metrics:\n{log.read_text()}")

    def prometheus(self, targets: list[int]) -> str:
        rules = yaml.safe_load(RULES.read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                rule["for"] = "0s"
        (self.tmp / "rules.yml").write_text(yaml.safe_dump(rules))
        (self.tmp / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(self.tmp / "rules.yml")],
            "scrape_configs": [{"job_name": "stead", "static_configs": [
                {"targets": [f"127.0.0.1:{p}" for p in targets]}]}],
        }))
        port = _free_port()
        self.start(["prometheus", f"--config.file={self.tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}"], "prometheus")
        return f"http://127.0.0.1:{port}"

    def stop_all(self) -> None:
        for proc, _log in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def fleet(tmp_path: Path, db_url: str) -> Iterator[Fleet]:
    if shutil.which("prometheus") is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is missing: .ci/run installs Debian's prometheus package")
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    f = Fleet(tmp_path, db_url)
    yield f
    f.stop_all()


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


async def _alerts(prometheus: str) -> dict[str, str]:
    """Each alert Prometheus has now, by name: its state (pending, firing)."""
    try:
        found = await asyncio.to_thread(_get, f"{prometheus}/api/v1/alerts")
    except OSError:
        return {}  # not up yet
    return {a["labels"]["alertname"]: a["state"] for a in found["data"]["alerts"]}


async def _until(what: str, check: Any, fleet: Fleet) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.25)
    logs = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}"
                     for _p, log in fleet.procs)
    raise AssertionError(f"{what} did not happen within {DEADLINE:g} s\n{logs}")


async def test_the_alerts_fire_on_a_dead_worker_and_an_unknown_outcome_and_clear(
        fleet: Fleet, db_url: str) -> None:
    from tests import metrics_app

    store = await stead.open_store(db_url)  # migrates a fresh database
    try:
        ports = [fleet.worker("w1"), fleet.worker("w2")]
        prometheus = fleet.prometheus(ports)
        client = stead.Client(store, metrics_app.app)
        info = await client.start(metrics_app.pay, 42)
        sending = fleet.tmp / "sending"

        async def sent() -> bool:
            return sending.exists()

        await _until("the effect being sent", sent, fleet)

        async def scraped() -> bool:
            found = await asyncio.to_thread(_get, f"{prometheus}/api/v1/targets")
            ups = [t["health"] for t in found["data"]["activeTargets"]]
            return ups == ["up", "up"]

        await _until("both workers scraped", scraped, fleet)
        assert "SteadEffectOutcomeUnknown" not in await _alerts(prometheus)
        os.kill(int(sending.read_text()), signal.SIGKILL)

        async def stopped() -> bool:
            return (await client.get(info.run_id)).status == "outcome_unknown"

        await _until("the run stopped as outcome_unknown", stopped, fleet)

        async def firing() -> bool:
            alerts = await _alerts(prometheus)
            return (alerts.get("SteadEffectOutcomeUnknown") == "firing"
                    and alerts.get("SteadWorkersDying") == "firing")

        await _until("SteadEffectOutcomeUnknown and SteadWorkersDying firing", firing, fleet)

        (fleet.tmp / "gate").touch()  # the resend goes through
        decided = subprocess.run(
            [sys.executable, "-m", "stead", "reconcile", info.run_id, "pay", "--not-happened",
             "--by", "on-call", "--why", "the ledger has no payment"],
            env=fleet.env, cwd=fleet.tmp, capture_output=True, text=True, timeout=DEADLINE)
        assert decided.returncode == 0, decided.stdout + decided.stderr

        async def cleared() -> bool:
            return "SteadEffectOutcomeUnknown" not in await _alerts(prometheus)

        await _until("SteadEffectOutcomeUnknown cleared", cleared, fleet)
        assert await client.result(info.run_id, timeout=DEADLINE) == "paid 42"
    finally:
        await store.close()


async def test_a_worker_process_drained_from_the_command_line_exits_0(
        fleet: Fleet, db_url: str) -> None:
    store = await stead.open_store(db_url)  # migrates a fresh database
    try:
        port = fleet.worker("w1")
        code, _ = await asyncio.to_thread(
            lambda: (urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz",
                                            timeout=10).status, None))
        assert code == 200
        asked = subprocess.run(
            [sys.executable, "-m", "stead", "workers", "drain", "w1", "--by", "ops", "--why",
             "node upgrade"], env=fleet.env, cwd=fleet.tmp, capture_output=True, text=True,
            timeout=DEADLINE)
        assert asked.returncode == 0, asked.stdout + asked.stderr
        proc, log = fleet.procs[0]
        assert await asyncio.to_thread(proc.wait, DEADLINE) == 0
        assert "drain requested" in log.read_text() and "node upgrade" in log.read_text()
    finally:
        await store.close()
