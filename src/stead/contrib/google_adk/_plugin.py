"""The ADK plugin `stead.contrib.google_adk.run` adds to the runner: its
before-model and before-tool callbacks answer each call from the journal (see
`_model` and `_tools`). Outside a stead run it answers nothing."""

from __future__ import annotations

from typing import Any

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from stead.contrib.google_adk import _model, _session, _tools


class SteadPlugin(BasePlugin):
    def __init__(self) -> None:
        super().__init__(name="stead")

    async def before_model_callback(self, *, callback_context: CallbackContext,
                                    llm_request: LlmRequest) -> LlmResponse | None:
        session = _session.CURRENT.get()
        if session is None:
            return None
        return await _model.answer(session, callback_context.agent_name, llm_request)

    async def before_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                   tool_context: ToolContext) -> dict[str, Any] | None:
        session = _session.CURRENT.get()
        if session is None:
            return None
        return await _tools.answer(session, tool, tool_args, tool_context)
