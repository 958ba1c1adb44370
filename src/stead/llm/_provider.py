"""What the provider adapters share: the request they send (defaults, then
the call's own parameters, without the SDKs' "not given" sentinels), the part
of it a call's digest covers, live text deltas, and rebuilding a recorded
response as the SDK's typed object without validating it."""

from __future__ import annotations

import abc
import contextvars
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from stead.llm.model import Completion

OnText = Callable[[str], Awaitable[None] | None]
# Where one call's text deltas go, when the call names a sink of its own.
_sink: contextvars.ContextVar[OnText | None] = contextvars.ContextVar(
    "stead_on_text", default=None)
M = TypeVar("M")

# Parameters that change how an answer travels or how long it may take, not
# what is asked: they stay out of a call's digest. Headers may also carry
# credentials, which have no business in a fingerprint.
TRANSPORT = frozenset({"timeout", "extra_headers"})


class Adapter(abc.ABC):
    """One provider API behind `run.llm`: `complete` sends the request
    (streaming it if asked) and normalises the answer into a `Completion`
    that keeps the provider's JSON. Each API says how it sends a request
    (`_created`) and how it streams one (`_streamed`)."""

    provider = ""
    api = ""

    def __init__(self, *, model: str, stream: bool, on_text: OnText | None,
                 sentinels: tuple[type, ...], defaults: Mapping[str, Any]) -> None:
        if not model or not isinstance(model, str):
            raise ValueError(f"{type(self).__name__} needs model=, the model's name")
        if on_text is not None and not stream:
            raise ValueError("on_text receives streamed text: pass stream=True with it")
        self.model = model
        self.stream = stream
        self.on_text = on_text
        self._sentinels = sentinels
        self.defaults = self._given(defaults)
        self.name = f"{self.provider}:{model}"

    def _given(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in params.items() if not isinstance(v, self._sentinels)}

    def request(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments sent with the messages: the model, the
        adapter's defaults, then the call's own parameters."""
        return {"model": self.model, **self.defaults, **self._given(params)}

    def digest_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """What a call's digest covers besides its messages (see `Model`)."""
        request = {k: v for k, v in self.request(params).items() if k not in TRANSPORT}
        return {"provider": self.provider, "api": self.api, "request": request}

    async def text(self, delta: str) -> None:
        sink = _sink.get() or self.on_text
        if sink is not None and delta:
            result = sink(delta)
            if inspect.isawaitable(result):
                await result

    async def complete(self, messages: Sequence[Mapping[str, Any]], *,
                       on_text: OnText | None = None, **params: Any) -> Completion:
        """Send the request; streamed if the adapter streams or this call
        passes `on_text` (`run.llm(..., on_text=run.stream("answer"))`), which
        then gets this call's text deltas in place of the adapter's."""
        request = self.request(params)
        if on_text is None and not self.stream:
            return await self._created(list(messages), request)
        token = _sink.set(on_text)
        try:
            return await self._streamed(list(messages), request)
        finally:
            _sink.reset(token)

    @abc.abstractmethod
    async def _created(self, messages: list[Mapping[str, Any]], request: dict[str, Any]
                       ) -> Completion: ...

    @abc.abstractmethod
    async def _streamed(self, messages: list[Mapping[str, Any]], request: dict[str, Any]
                        ) -> Completion: ...


def sdk_client(adapter: str, client: Any, max_retries: int) -> Any:
    """The SDK's async client an adapter sends through, its own retries set.

    The SDK's own retries are off unless asked for: a failed attempt is
    journaled and retried under the call's `retry=` (stead.Retry), whose
    backoff survives a restart. With max_retries=n the SDK also retries inside
    each journaled attempt, and the two multiply."""
    if not type(client).__name__.startswith("Async") or not hasattr(client, "with_options"):
        raise TypeError(f"{adapter} takes the SDK's async client (got {type(client).__name__})")
    return client.with_options(max_retries=max_retries)


def rebuild(cls: type[M], completion: Completion, provider: str) -> M:
    """The SDK's typed response of a completion, built from the provider's
    JSON the way the SDKs parse their own responses: without validation, so
    a response recorded before the SDK required a new field still loads."""
    if completion.raw is None or completion.provider != provider:
        raise ValueError(
            f"this completion holds no {provider} response (provider "
            f"{completion.provider or 'none'!r}); it was not made by a {provider} adapter")
    typed = cls.model_construct(**completion.raw)  # type: ignore[attr-defined]
    typed._request_id = completion.request_id
    return typed  # type: ignore[no-any-return]


def number(data: Any, *path: str) -> int:
    """The integer at `path` in a JSON object, 0 where it is missing or null."""
    for key in path:
        if not isinstance(data, Mapping):
            return 0
        data = data.get(key)
    return int(data) if isinstance(data, int | float) else 0
