"""MCP tools, durable: `tools = stead.contrib.mcp.journaled(run, session)`
wraps an `mcp.ClientSession` in a stead workflow, and

- every `await tools.call_tool(name, arguments)` is a `run.step` holding the
  server's result: a resumed run gets it back and the server is not asked
  again (a tool's own error result is a result, journaled as it came);
- a tool declared side-effecting (`effects={"refund": Effect(...)}`, or
  marked destructive or not read-only by the server's annotations) is a
  write-ahead `run.effect` instead: at most once, its idempotency key sent in
  the request's `_meta` (`"stead/idempotency-key"`) and, with `key_argument=`,
  as that argument; after a crash it is resent only if idempotent, else
  `check` is asked, else the run stops for a person (`stead reconcile`); with
  `tool=` it is sent only under a grant of the run's intent;
- `await tools.list_tools()` is journaled too, so a replay sees the tools
  (and their annotations) the first attempt saw.

`stead.contrib.mcp.agents_sdk.function_tools(tools)` hands the listed tools
to an OpenAI Agents SDK agent, journaled by `stead.contrib.openai_agents.run`.
See docs/architecture.md.

Needs `pip install -e '.[mcp]'`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp
from mcp import types

import stead
from stead.contrib.mcp._calls import KEY_META, Effect, side_effecting
from stead.contrib.mcp._calls import call as _call


class Tools:
    """An MCP client session whose tool calls are journaled in a stead run."""

    def __init__(self, run: stead.Run, session: mcp.ClientSession, *, server: str,
                 effects: Mapping[str, Effect] | None) -> None:
        self.run = run
        self.session = session
        self.server = server
        self._effects = dict(effects or {})
        self._declared: dict[str, Effect] = {}  # by the server's annotations

    async def list_tools(self) -> types.ListToolsResult:
        """The server's tools (one page), journaled; what they declare of their
        side effects is read from here."""
        async def ask() -> dict[str, Any]:
            listed = await self.session.list_tools()
            return listed.model_dump(mode="json", by_alias=True, exclude_none=True)

        listed = types.ListToolsResult.model_validate(
            await self.run.step(f"mcp {self.server}.list_tools", ask))
        for tool in listed.tools:
            declared = side_effecting(tool)
            if declared is not None:
                self._declared[tool.name] = declared
        return listed

    def effect(self, name: str) -> Effect | None:
        """How tool `name` is called: as an effect (declared or annotated), or not."""
        return self._effects.get(name) or self._declared.get(name)

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None,
                        **options: Any) -> types.CallToolResult:
        """`session.call_tool(name, arguments)`, journaled (`options` such as
        `read_timeout_seconds=` go to the session)."""
        return await _call(self.run, self.session, self.server, name, dict(arguments or {}),
                           self.effect(name), **options)


def journaled(run: stead.Run, session: mcp.ClientSession, *, server: str = "mcp",
              effects: Mapping[str, Effect] | None = None) -> Tools:
    """`session`'s tool calls journaled in the workflow's `run`, named
    `mcp <server>.<tool>` in the journal."""
    return Tools(run, session, server=server, effects=effects)


__all__ = ["KEY_META", "Effect", "Tools", "journaled"]
