"""A real worker process running the two-tool agent of tests/sdk_agents.py
through an SDK adapter, its HTTP served from recorded answers.

    python agent_worker.py --db URL --provider openai_chat --http-log FILE --tool-log FILE
        [--crash-after-tool NAME] [--spans FILE]

Every HTTP request appends a line to the HTTP log and every tool run one to
the tool log, so the test counts what happened over every process.
`--crash-after-tool` SIGKILLs the process once that tool's step is durable.
`--spans` turns tracing on and appends each finished span to FILE as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import stead
import stead.tracing
from stead.testing import CrashPoint
from tests import sdk_agents
from tests.workers import procs

app = stead.App("sdk-agents")


class _Config:
    provider = ""
    http_log: Path | None = None


CONFIG = _Config()


@app.workflow(version=1)
async def agent(run: stead.Run, provider: str) -> str:
    rec = sdk_agents.Recorded(provider, CONFIG.http_log)
    return await sdk_agents.agent(run, provider, sdk_agents.model(provider, rec.client()))


def _trace_to(path: Path) -> None:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class ToFile(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            for s in spans:
                assert s.context is not None
                sdk_agents.append_line(path, json.dumps({
                    "name": s.name, "span_id": f"{s.context.span_id:016x}",
                    "parent": None if s.parent is None else f"{s.parent.span_id:016x}",
                    "links": [f"{link.context.span_id:016x}" for link in s.links],
                    "attributes": dict(s.attributes or {})}))
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ToFile()))
    stead.tracing.instrument(tracer_provider=provider)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--http-log", required=True, type=Path)
    p.add_argument("--tool-log", required=True, type=Path)
    p.add_argument("--crash-after-tool")
    p.add_argument("--spans", type=Path)
    args = p.parse_args()
    if args.spans:
        _trace_to(args.spans)
    CONFIG.http_log = args.http_log
    sdk_agents.ToolLog.path = args.tool_log
    point = None if not args.crash_after_tool else CrashPoint(
        after_commit=1, name=f"tool:{args.crash_after_tool}")
    await procs.drain(app, args.db, point)

if __name__ == "__main__":
    asyncio.run(main())
