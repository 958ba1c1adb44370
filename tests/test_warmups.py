"""What the SDK integrations build once per process (their pydantic schemas)
is built before a worker's first claim, in a thread, so a run's first model
answer does not hold the event loop."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading

import pytest

import stead
from stead import warmups


async def test_a_warm_up_runs_in_a_thread_before_the_first_claim(store: stead.Store) -> None:
    order: list[str] = []
    threads: list[int] = []

    def warm() -> None:
        threads.append(threading.get_ident())
        order.append("warm")

    app = stead.App("t")

    @app.workflow(version=1)
    async def wf(run: stead.Run) -> None:
        order.append("run")

    warmups.register(warm)
    client = stead.Client(store, app)
    await client.start(wf)
    await stead.Worker(app, store).run_until_idle()
    await client.start(wf)
    await stead.Worker(app, store).run_until_idle()
    assert order == ["warm", "run", "run"]  # once per process
    assert threads != [threading.get_ident()]


async def test_a_failing_warm_up_is_logged_and_the_worker_works(
    store: stead.Store, caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> None:
        raise RuntimeError("no schema today")

    app = stead.App("t")

    @app.workflow(version=1)
    async def wf(run: stead.Run) -> str:
        return "done"

    warmups.register(broken)
    client = stead.Client(store, app)
    info = await client.start(wf)
    with caplog.at_level(logging.ERROR, logger="stead.worker"):
        await stead.Worker(app, store).run_until_idle()
    assert await client.result(info.run_id) == "done"
    assert "warming up" in caplog.text and "broken" in caplog.text


CHECK = """
import asyncio
from agents.tracing import setup
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
import stead.llm.openai
from stead import warmups
from stead.contrib.openai_agents import _responses as r

built = lambda: (r._Output.__pydantic_complete__, ChatCompletion.__pydantic_complete__,
                 Response.__pydantic_complete__, setup.GLOBAL_TRACE_PROVIDER is not None)
print(built())
asyncio.run(warmups.ready())
print(built())
"""


def test_the_openai_integrations_build_their_schemas_in_the_warm_up() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         timeout=60, check=True).stdout.splitlines()
    assert out == ["(False, False, False, False)", "(True, True, True, True)"]


IDLE_CHECK = """
import asyncio, sys, tempfile
import stead

app = stead.App("idle")


@app.workflow(version=1)
async def wf(run: stead.Run) -> None:
    pass


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = await stead.open_store(f"sqlite:///{folder}/s.db")
        print("stead.workflow.waits" in sys.modules)
        worker = stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.05))
        task = asyncio.create_task(worker.run())
        for _ in range(200):
            if "stead.workflow.waits" in sys.modules:
                break
            await asyncio.sleep(0.05)
        print("stead.workflow.waits" in sys.modules)
        worker.stop()
        await task
        await store.close()


asyncio.run(main())
"""


def test_an_idle_worker_imports_what_a_woken_runs_wait_needs() -> None:
    """Not `import stead` (every process pays for that), but a worker with
    nothing to do: the first run a delivery wakes does not import it on the
    event loop."""
    out = subprocess.run([sys.executable, "-c", IDLE_CHECK], capture_output=True, text=True,
                         timeout=60, check=True).stdout.splitlines()
    assert out == ["False", "True"]
