"""CrewAI's model calls, journaled through `stead.llm.LiteLLM`.

A CrewAI `LLM(model, is_litellm=True)` sends each request with
`litellm.completion` or `litellm.acompletion`, looked up in `crewai.llm`. Once
a crew or flow is kicked off by stead, that name holds `JournaledLiteLLM`,
which is LiteLLM itself except inside a stead kickoff: there each request is
a `run.llm` call (asked once, ever; usage and request id journaled) and
CrewAI gets LiteLLM's typed `ModelResponse` back, rebuilt from the journal on
replay. Calls made inside a journaled flow method are covered by that
method's record and go to LiteLLM as they are.

A streamed request (`LLM(..., stream=True)`) is streamed from the provider
and journaled as the answer LiteLLM builds from its chunks; CrewAI then
iterates chunks rebuilt from that answer (`chunks`): its text in one, its
tool calls in one, its finish reason, its usage. Live and on replay alike,
so a resumed crew gets the same chunks and the same text, and the model is
not asked again."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import crewai.llm as crewai_llm

from stead import errors
from stead.contrib.crewai._session import Session, journaling
from stead.llm import litellm as sl


class CrewModel(sl.LiteLLM):
    """`stead.llm.LiteLLM` for CrewAI's requests. Its ReAct stop word stays out
    of the digest: CrewAI sets it on an agent's LLM when it first needs it, so
    whether the first request of a process carries it depends on what ran
    before in that process, not on what is asked."""

    def digest_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        shape = super().digest_params(params)
        shape["request"].pop("stop", None)
        return shape


class JournaledLiteLLM:
    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def completion(self, **params: Any) -> Any:
        session = journaling()
        if session is None:
            return self._real.completion(**params)
        answer = session.blocking(asked(session, params))
        return iter(chunks(answer)) if params.get("stream") else answer

    async def acompletion(self, **params: Any) -> Any:
        session = journaling()
        if session is None:
            return await self._real.acompletion(**params)
        answer = await asked(session, params)
        return _replayed(chunks(answer)) if params.get("stream") else answer


def install() -> None:
    """Put `JournaledLiteLLM` where CrewAI looks LiteLLM up (once)."""
    if not crewai_llm._ensure_litellm():
        raise errors.SteadError("CrewAI could not import LiteLLM: pip install -e '.[crewai]'")
    namespace = vars(crewai_llm)  # the module's globals, where its functions look LiteLLM up
    if not isinstance(namespace["litellm"], JournaledLiteLLM):
        namespace["litellm"] = JournaledLiteLLM(namespace["litellm"])


def _json(name: str, value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        raise errors.SteadError(
            f"CrewAI sent the model a {name}= stead cannot journal ({type(value).__name__}); "
            "journaled CrewAI model calls take JSON parameters") from None
    return True


async def asked(session: Session, params: dict[str, Any]) -> Any:
    """One request CrewAI sends LiteLLM, as a journaled `run.llm` call: its
    answer as LiteLLM's `ModelResponse`. A streamed request is streamed from
    the provider (its text deltas go to the kickoff's `on_text`, live only)
    and journaled as the answer built from its chunks; whether it was
    streamed is not part of what is asked."""
    params = {k: v for k, v in params.items() if v is not None and k != "stream_options"}
    streamed = bool(params.pop("stream", False))
    model = str(params.pop("model"))
    messages = params.pop("messages")
    params = {k: v for k, v in params.items() if _json(k, v)}
    scope = session.scope
    with scope.at("m:" + scope.next("model")):
        completion = await session.run.llm(
            f"model {model}", CrewModel(model, stream=streamed), messages,
            **({"on_text": session.on_text} if streamed and session.on_text else {}), **params)
    return sl.model_response(completion)


def chunks(answer: Any) -> list[Any]:
    """The chunks CrewAI reads a streamed answer from, rebuilt from the whole
    `answer` (a `ModelResponse`): its text, its tool calls, its finish reason,
    then its usage alone, as LiteLLM's last chunk carries it."""
    from litellm.types.utils import Delta, ModelResponseStream, StreamingChoices

    def chunk(delta: Any = None, finish: str | None = None, **extra: Any) -> Any:
        choices = [] if delta is None else [
            StreamingChoices(index=0, delta=delta, finish_reason=finish)]
        return ModelResponseStream(id=answer.id, created=answer.created, model=answer.model,
                                   choices=choices, **extra)

    choice = answer.choices[0]
    message = choice.message
    found = []
    if message.content:
        found.append(chunk(Delta(content=message.content, role="assistant")))
    if message.tool_calls:
        found.append(chunk(Delta(tool_calls=[
            {"index": i, "id": c.id, "type": "function",
             "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for i, c in enumerate(message.tool_calls)])))
    found.append(chunk(Delta(), choice.finish_reason or "stop"))
    usage = getattr(answer, "usage", None)
    if usage is not None:
        found.append(chunk(usage=usage))
    return found


async def _replayed(found: list[Any]) -> AsyncIterator[Any]:
    for c in found:
        yield c
