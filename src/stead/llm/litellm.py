"""Any model LiteLLM reaches, for `run.llm` (`pip install -e '.[litellm]'`):
`LiteLLM(model="anthropic/claude-sonnet-4-6")`, `"gemini/gemini-2.5-pro"`,
`"bedrock/..."`, `"ollama/..."`, a `litellm.Router`'s model group.

LiteLLM answers every provider in the Chat Completions shape; the journal
keeps that JSON, the provider's request id (from the response's headers, as
LiteLLM passes them on) and normalised usage. `model_response(c)` gives
LiteLLM's typed `ModelResponse` back, live and on replay alike;
`assistant_message` and `tool_message` extend the conversation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    import litellm
    from litellm import exceptions
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("stead.llm.litellm needs LiteLLM: pip install -e '.[litellm]' in "
                      "stead's checkout (docs/install.md)") from exc

from stead.llm import _provider
from stead.llm import openai as _openai
from stead.llm._provider import OnText
from stead.llm.model import Completion, ToolCall

PROVIDER = "litellm"

# The errors worth another attempt under `retry=stead.Retry(on=TRANSIENT)`:
# LiteLLM maps every provider's rate limits, overloads, server failures and
# dropped or slow connections onto these.
TRANSIENT: tuple[type[BaseException], ...] = (
    exceptions.RateLimitError, exceptions.InternalServerError,
    exceptions.ServiceUnavailableError, exceptions.APIConnectionError, exceptions.Timeout)

# Where a request goes and with what credentials, how it is retried, what
# LiteLLM logs with it: none of it changes what is asked, so none of it enters
# a call's digest (credentials have no business in a fingerprint). A test's
# `mock_response` stands in for the provider, so it is not part of the question either.
_NOT_ASKED = frozenset({"api_key", "api_base", "base_url", "api_version", "organization",
                        "num_retries", "metadata", "litellm_logging_obj", "mock_response",
                        "mock_tool_calls", "mock_delay"})
# The response headers LiteLLM passes on that name the provider's request.
_REQUEST_ID_HEADERS = ("request-id", "x-request-id", "llm_provider-request-id",
                       "llm_provider-x-request-id")


class LiteLLM(_provider.Adapter):
    """`litellm.acompletion(model=model, messages=..., **defaults, **params)`
    (or `router.acompletion`, given a `litellm.Router`). `stream=True`
    streams it (`on_text` gets each text delta as it arrives) and journals the
    answer LiteLLM builds from the chunks; a replay returns it at once, with no
    deltas. LiteLLM's own retries are off (`num_retries=0`): use
    `run.llm(..., retry=stead.Retry(on=stead.llm.litellm.TRANSIENT))`."""

    provider = PROVIDER
    api = "completion"

    def __init__(self, model: str, *, router: Any = None, max_retries: int = 0,
                 stream: bool = False, on_text: OnText | None = None,
                 **defaults: Any) -> None:
        if router is not None and not hasattr(router, "acompletion"):
            raise TypeError(f"LiteLLM's router= takes a litellm.Router (got {type(router)})")
        self.router = router
        super().__init__(model=model, stream=stream, on_text=on_text, sentinels=(),
                         defaults={"num_retries": max_retries, **defaults})

    def digest_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        shape = super().digest_params(params)
        shape["request"] = {k: v for k, v in shape["request"].items() if k not in _NOT_ASKED}
        return shape

    def _send(self, messages: list[Mapping[str, Any]], request: dict[str, Any]) -> Any:
        send = self.router.acompletion if self.router is not None else litellm.acompletion
        return send(messages=messages, **request)

    async def _created(self, messages: list[Mapping[str, Any]], request: dict[str, Any]
                       ) -> Completion:
        answer = await self._send(messages, request)
        return _completion(answer.model_dump(mode="json"), _request_id(answer))

    async def _streamed(self, messages: list[Mapping[str, Any]], request: dict[str, Any]
                        ) -> Completion:
        request["stream"] = True
        request.setdefault("stream_options", {"include_usage": True})  # usage counts for budgets
        stream = await self._send(messages, request)
        chunks = []
        async for chunk in stream:
            chunks.append(chunk)
            choices = getattr(chunk, "choices", None) or ()
            delta = getattr(choices[0], "delta", None) if choices else None
            await self.text(getattr(delta, "content", None) or "")
        final = litellm.stream_chunk_builder(chunks, messages=messages)
        if final is None:
            raise exceptions.APIConnectionError(
                message="the stream ended before any chunk arrived", llm_provider="",
                model=self.model)
        return _completion(_openai._chat_json(final.model_dump(mode="json")),
                           _request_id(stream) or _request_id(final))


def _request_id(answer: Any) -> str | None:
    hidden = getattr(answer, "_hidden_params", None)
    headers = hidden.get("additional_headers") if isinstance(hidden, Mapping) else None
    if not isinstance(headers, Mapping):
        return None
    lowered = {str(k).lower(): v for k, v in headers.items()}
    found = next((lowered[h] for h in _REQUEST_ID_HEADERS if lowered.get(h)), None)
    return found if isinstance(found, str) else None


def _completion(raw: dict[str, Any], request_id: str | None) -> Completion:
    return _openai._chat(raw, request_id, PROVIDER)


def model_response(completion: Completion) -> litellm.ModelResponse:
    """LiteLLM's `ModelResponse` of a completion made by `LiteLLM`, built
    from the journaled JSON as LiteLLM builds one from a provider's answer."""
    if completion.raw is None or completion.provider != PROVIDER:
        raise ValueError(
            f"this completion holds no LiteLLM response (provider "
            f"{completion.provider or 'none'!r}); it was not made by stead.llm.LiteLLM")
    return litellm.ModelResponse(**completion.raw)


def assistant_message(completion: Completion) -> dict[str, Any]:
    """The assistant message of an answer, to append to the conversation:
    its text and its tool calls, arguments as they came."""
    return _openai.assistant_message(completion)


def tool_message(call: ToolCall, content: str) -> dict[str, Any]:
    """The message answering `call` with `content`."""
    return _openai.tool_message(call, content)


__all__ = ["TRANSIENT", "LiteLLM", "assistant_message", "model_response", "tool_message"]
