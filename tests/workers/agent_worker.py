"""A real worker process running the two-tool agent of tests/sdk_agents.py
through an SDK adapter, its HTTP served from recorded answers.

    python agent_worker.py --db URL --provider openai_chat --http-log FILE --tool-log FILE
        [--crash-after-tool NAME]

Every HTTP request appends a line to the HTTP log and every tool run one to
the tool log, so the test counts what happened over every process.
`--crash-after-tool` SIGKILLs the process once that tool's step is durable.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import stead
from stead.testing import CrashingStore, CrashPoint
from tests import sdk_agents

app = stead.App("sdk-agents")


class _Config:
    provider = ""
    http_log: Path | None = None


CONFIG = _Config()


@app.workflow(version=1)
async def agent(run: stead.Run, provider: str) -> str:
    rec = sdk_agents.Recorded(provider, CONFIG.http_log)
    return await sdk_agents.agent(run, provider, sdk_agents.model(provider, rec.client()))


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--http-log", required=True, type=Path)
    p.add_argument("--tool-log", required=True, type=Path)
    p.add_argument("--crash-after-tool")
    args = p.parse_args()
    CONFIG.http_log = args.http_log
    sdk_agents.ToolLog.path = args.tool_log
    inner = await stead.open_store(args.db)
    store: stead.Store = inner
    if args.crash_after_tool:
        store = CrashingStore(inner, CrashPoint(after_commit=1,
                                                name=f"tool:{args.crash_after_tool}"))
    worker = stead.Worker(app, store, stead.WorkerOptions(lease_seconds=1.0, poll_interval=0.05))
    try:
        await worker.run_until_idle()  # a crashed worker's lease is waited out
    finally:
        await inner.close()


if __name__ == "__main__":
    asyncio.run(main())
