"""An MCP server's tools for the OpenAI Agents SDK, journaled: `await
function_tools(tools)` lists the server's tools through the journaled
`Tools` (so a replay hands the agent the same tools) and makes each a
`FunctionTool` whose call is `session.call_tool`. Run the agent with
`stead.contrib.openai_agents.run`, which journals each call as a step by its
tool-call id: a resumed run gets the server's answer back and does not call
the tool again.

A tool declared side-effecting (by `effects=` or the server's annotations) is
refused here: a step after a crash in flight runs again, and such a tool must
not. Leave it out (`names=`) and call it through `Tools.call_tool` in the
workflow, where it is an effect. Needs `pip install -e '.[mcp,openai-agents]'`."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import mcp
from agents import FunctionTool
from agents.tool_context import ToolContext

from stead import errors
from stead.contrib.mcp import Tools


def _text(result: Any) -> str:
    """What the model is told: the result's text, else its structured content."""
    text = "".join(c.text for c in result.content if getattr(c, "type", None) == "text")
    if text or result.structured_content is None:
        return text
    return json.dumps(result.structured_content)


def _invoke(session: mcp.ClientSession, name: str
            ) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> str:
        decoded = json.loads(arguments) if arguments else {}
        if not isinstance(decoded, dict):
            raise errors.SteadError(f"MCP tool {name!r} takes an object of arguments, "
                                    f"the model sent {type(decoded).__name__}")
        return _text(await session.call_tool(name, decoded))

    return on_invoke_tool


async def function_tools(tools: Tools, *, names: Collection[str] | None = None
                         ) -> list[FunctionTool]:
    """The server's tools (those in `names`, if given) as function tools."""
    listed = await tools.list_tools()
    made: list[FunctionTool] = []
    for tool in listed.tools:
        if names is not None and tool.name not in names:
            continue
        if tools.effect(tool.name) is not None:
            raise errors.SteadError(
                f"MCP tool {tool.name!r} is side-effecting: as an agent's function tool it "
                "would be a step, run again after a crash in flight. Leave it out with "
                "names=, and call it with tools.call_tool in the workflow (an effect)")
        made.append(FunctionTool(
            name=tool.name, description=tool.description or "",
            params_json_schema=tool.input_schema, on_invoke_tool=_invoke(tools.session, tool.name),
            strict_json_schema=False))
    return made


__all__ = ["function_tools"]
