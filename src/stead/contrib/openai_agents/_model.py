"""The agent's model, journaled: each `get_response` is a `run.step` whose
record holds the answer (output items, usage, response and request ids), so a
resumed run gets it back without asking the model again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agents import Handoff, Model, ModelProvider, ModelResponse, ModelSettings, ModelTracing, Tool
from agents.agent_output import AgentOutputSchemaBase
from agents.items import TResponseInputItem, TResponseStreamEvent
from openai.types.responses import Response, ResponseCompletedEvent
from openai.types.responses.response_prompt_param import ResponsePromptParam
from pydantic_core import to_jsonable_python

from stead.contrib import _conversation as conv
from stead.contrib._scope import Scope, json_digest
from stead.contrib.openai_agents import _conversation, _responses
from stead.contrib.openai_agents._session import Session


def model_name(model: Model) -> str:
    """What enters a model call's digest and record name: its model id if it has one."""
    named = getattr(model, "model", None)
    return named if isinstance(named, str) and named else type(model).__name__


def _tool(tool: Any) -> dict[str, Any]:
    """A tool (or a handoff) as the model is told of it: its name, and its
    description and parameters when it has them."""
    found = {"name": getattr(tool, "name", None) or getattr(tool, "tool_name", None),
             "description": getattr(tool, "description", None)
             or getattr(tool, "tool_description", None),
             "parameters": getattr(tool, "params_json_schema", None)
             or getattr(tool, "input_json_schema", None)}
    return {k: v for k, v in found.items() if v is not None}


def _type_name(value: Any) -> str:
    """An object with no JSON form enters the digest by its type, never by its
    repr: a repr may carry a memory address, different on every replay."""
    return type(value).__qualname__


class JournaledModel(Model):
    def __init__(self, inner: Model, session: Session) -> None:
        self.inner = inner
        self.model = model_name(inner)
        self._session = session

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        # What the request was, as a digest: a changed prompt, history or model
        # under a recorded answer is detected on replay, not silently reused.
        request = {
            "model": self.model,
            "request": json_digest(to_jsonable_python({
                "instructions": system_instructions, "input": input,
                "settings": model_settings.to_json_dict(),
                "tools": sorted(t.name for t in tools),
                "handoffs": sorted(h.tool_name for h in handoffs),
                "output": None if output_schema is None else output_schema.name(),
                "previous_response_id": previous_response_id,
                "conversation_id": conversation_id, "prompt": prompt,
            }, fallback=_type_name)),
        }

        async def ask(_request: dict[str, Any]) -> dict[str, Any]:
            response = await self.inner.get_response(
                system_instructions, input, model_settings, tools, output_schema, handoffs,
                tracing, previous_response_id=previous_response_id,
                conversation_id=conversation_id, prompt=prompt)
            return _responses.dump(response)

        def sent() -> tuple[list[dict[str, Any]], dict[str, Any]]:
            params = {
                "model": self.model, "settings": {k: v for k, v in model_settings.to_json_dict(
                    ).items() if v is not None},
                "tools": [_tool(t) for t in tools],
                "handoffs": [_tool(h) for h in handoffs],
                "output": None if output_schema is None else output_schema.name(),
                "previous_response_id": previous_response_id,
                "conversation_id": conversation_id, "prompt": prompt}
            return (_conversation.messages(system_instructions, input),
                    conv.jsonable({k: v for k, v in params.items() if v not in (None, [])}))

        said = conv.Said(sent, lambda data: _conversation.answer(data, self.model))
        scope: Scope = self._session.scope
        with scope.at("m:" + scope.next("model")):
            data = await self._session.run.model_step(f"model {self.model}", ask, request,
                                                      said=said)
        return _responses.load(data)

    async def stream_response(  # the same parameters as get_response
        self, *args: Any, **kwargs: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """The journaled answer as one `response.completed` event: a journaled
        call is asked whole (its record is written once the answer is complete),
        and a replayed one has no deltas to give."""
        answer = await self.get_response(*args, **kwargs)
        usage = answer.usage
        response = Response.construct(
            id=answer.response_id or "", object="response", created_at=0.0, model=self.model,
            output=answer.output, parallel_tool_calls=True, tool_choice="auto", tools=[],
            status="completed",
            usage={"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                   "total_tokens": usage.total_tokens,
                   "input_tokens_details": {"cached_tokens":
                                            usage.input_tokens_details.cached_tokens},
                   "output_tokens_details": {"reasoning_tokens":
                                             usage.output_tokens_details.reasoning_tokens}},
        )
        yield ResponseCompletedEvent(type="response.completed", response=response,
                                     sequence_number=0)

    async def close(self) -> None:
        await self.inner.close()


class JournaledProvider(ModelProvider):
    """Looks models up by name through `inner`, and journals them."""

    def __init__(self, inner: ModelProvider, session: Session) -> None:
        self._inner = inner
        self._session = session

    def get_model(self, model_name: str | None) -> Model:
        return JournaledModel(self._inner.get_model(model_name), self._session)

    async def aclose(self) -> None:
        await self._inner.aclose()


def journaled(model: Model, session: Session) -> Model:
    return model if isinstance(model, JournaledModel) else JournaledModel(model, session)

