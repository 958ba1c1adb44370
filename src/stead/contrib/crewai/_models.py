"""CrewAI's model calls, journaled through `stead.llm.LiteLLM`.

A CrewAI `LLM(model, is_litellm=True)` sends each request with
`litellm.completion` or `litellm.acompletion`, looked up in `crewai.llm`. Once
a crew or flow is kicked off by stead, that name holds `JournaledLiteLLM`,
which is LiteLLM itself except inside a stead kickoff: there each request is
a `run.llm` call (asked once, ever; usage and request id journaled) and
CrewAI gets LiteLLM's typed `ModelResponse` back, rebuilt from the journal on
replay. Calls made inside a journaled flow method are covered by that
method's record and go to LiteLLM as they are."""

from __future__ import annotations

import json
from collections.abc import Mapping
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
        return session.blocking(asked(session, params))

    async def acompletion(self, **params: Any) -> Any:
        session = journaling()
        if session is None:
            return await self._real.acompletion(**params)
        return await asked(session, params)


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
    """One request CrewAI sends LiteLLM, as a journaled `run.llm` call."""
    params = {k: v for k, v in params.items() if v is not None}
    if params.pop("stream", False):
        raise errors.SteadError(
            "a streamed CrewAI model call is not journaled: give the crew's LLM stream=False")
    model = str(params.pop("model"))
    messages = params.pop("messages")
    params = {k: v for k, v in params.items() if _json(k, v)}
    scope = session.scope
    with scope.at("m:" + scope.next("model")):
        completion = await session.run.llm(f"model {model}", CrewModel(model), messages,
                                           **params)
    return sl.model_response(completion)
