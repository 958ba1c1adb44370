"""A model call, journaled: the plugin's `before_model_callback` asks the
agent's own model inside a `run.step` and answers with the recorded
`LlmResponse` (ADK's own JSON, validated back into its type), so ADK skips its
call and a resumed run never asks the model again.

A function call the model left without an id gets one made from its place in
the journal before it is recorded: ADK would otherwise make a random one on
every replay, and tool calls are journaled by their id. It carries ADK's
prefix for ids of its own making, so ADK leaves it out of what the model is
sent, as it does its own. With SSE streaming
the live call streams, and its text deltas go to `on_text` as they arrive; a
replayed call has none to give."""

from __future__ import annotations

from typing import Any

from google.adk.flows.llm_flows.functions import AF_FUNCTION_CALL_ID_PREFIX
from google.adk.models import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from pydantic_core import to_jsonable_python

from stead import calls, errors
from stead.contrib import _conversation as conv
from stead.contrib._scope import json_digest
from stead.contrib.google_adk import _conversation, _session
from stead.contrib.google_adk._session import Session


def _type_name(value: Any) -> str:
    return type(value).__qualname__


def _request(model: BaseLlm, request: LlmRequest) -> dict[str, Any]:
    """What a request was, as a digest: a changed prompt, history or toolset
    under a recorded answer is detected on replay, not silently reused."""
    config = request.config
    return {"model": model.model, "request": json_digest(to_jsonable_python({
        "contents": [c.model_dump(mode="json", exclude_none=True) for c in request.contents],
        "system": None if config is None else to_jsonable_python(
            config.system_instruction, fallback=_type_name),
        "tools": sorted(request.tools_dict),
    }, fallback=_type_name))}


def _with_ids(response: LlmResponse, key: str) -> LlmResponse:
    parts = response.content.parts if response.content is not None else None
    for index, part in enumerate(parts or []):
        if part.function_call is not None and not part.function_call.id:
            part.function_call.id = f"{AF_FUNCTION_CALL_ID_PREFIX}stead-{key}-{index}"
    return response


async def answer(session: Session, agent_name: str, request: LlmRequest) -> LlmResponse:
    agent = session.root.find_agent(agent_name)
    model = getattr(agent, "canonical_model", None)
    if not isinstance(model, BaseLlm):
        raise errors.SteadError(
            f"ADK agent {agent_name!r} has no model stead can ask: journaled model calls are "
            "made by an LlmAgent's model")
    scope = session.scope
    key = scope.next("model")

    async def ask(_request: dict[str, Any]) -> dict[str, Any]:
        final: LlmResponse | None = None
        with _session.bound(None):
            async for response in model.generate_content_async(request,
                                                               stream=session.streaming):
                if response.partial:
                    if session.on_text is not None and response.content is not None:
                        text = "".join(p.text or "" for p in response.content.parts or [])
                        if text:
                            await calls.invoke(session.on_text, (text,), {})
                    continue
                final = response
        if final is None:
            raise errors.SteadError(f"model {model.model!r} gave no complete answer")
        data: dict[str, Any] = _with_ids(final, key).model_dump(mode="json", exclude_none=True,
                                                                by_alias=True)
        return data

    def sent() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        config = request.config
        contents = [c.model_dump(mode="json", exclude_none=True) for c in request.contents]
        tools = [d.model_dump(mode="json", exclude_none=True)
                 for t in (config.tools or [] if config is not None else [])
                 for d in (getattr(t, "function_declarations", None) or [])]
        params: dict[str, Any] = {"model": model.model,
                                  "tools": tools or sorted(request.tools_dict)}
        if config is not None:
            params["config"] = config.model_dump(mode="json", exclude_none=True, exclude={
                "system_instruction", "tools", "http_options"})
        return (_conversation.messages(None if config is None else config.system_instruction,
                                       contents),
                conv.jsonable({k: v for k, v in params.items() if v not in (None, [], {})}))

    said = conv.Said(sent, lambda data: _conversation.answer(data, model.model))
    with scope.at("m:" + key):
        data = await session.run.model_step(f"model {model.model}", ask,
                                            _request(model, request), said=said)
    return LlmResponse.model_validate(data)
