"""OpenTelemetry spans and metrics for runs (`pip install -e '.[otel]'`).

Off until `instrument()` is called; without it (or without opentelemetry
installed) every hook here is a no-op costing one check. Once on:

- one span per execution attempt of a run (`stead.run.id`, epoch, worker,
  task), linked to the previous attempt's span: each attempt journals its
  span context (a `trace` record, skipped by replay), so the link survives
  the crash of the worker that made it;
- one span per live model call, with the GenAI conventions (provider,
  request model, response id and model, finish reason, token usage; the
  messages only with `capture_content=True`) and the `gen_ai.client.token.usage`
  histogram. An SDK's own client span nests under it;
- one span per live step and effect (an effect's key and resume class).

A replayed record makes no span and counts no tokens: the attempt's span
gets one `stead.replay` event with the number of records reused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram, MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from stead.llm.model import Completion

SCOPE = "stead"


@dataclasses.dataclass
class _State:
    tracer: Tracer
    tokens: Histogram
    capture_content: bool


_STATE: _State | None = None


def instrument(*, tracer_provider: TracerProvider | None = None,
               meter_provider: MeterProvider | None = None,
               capture_content: bool = False) -> None:
    """Emit spans (and token metrics) through these providers (the global
    ones by default). `capture_content=True` adds the messages sent and
    received to model spans: they may hold personal data, so it is off."""
    global _STATE
    try:
        from opentelemetry import metrics, trace
    except ImportError as exc:
        raise ImportError("stead.tracing needs OpenTelemetry: pip install -e '.[otel]' in "
                          "stead's checkout (docs/install.md)") from exc
    tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
    meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
    tokens = meter.create_histogram(
        "gen_ai.client.token.usage", unit="{token}",
        description="Tokens used by model calls stead made (replayed calls count none)")
    _STATE = _State(tracer, tokens, capture_content)


def uninstrument() -> None:
    """Stop emitting: the hooks are no-ops again."""
    global _STATE
    _STATE = None


def enabled() -> bool:
    return _STATE is not None


# -- execution attempts -----------------------------------------------------------
@dataclasses.dataclass
class Attempt:
    """The span of one execution attempt (None when tracing is off)."""

    span: Span | None = None

    def context(self) -> dict[str, str] | None:
        """The span's ids, journaled for the next attempt to link to."""
        if self.span is None:
            return None
        ctx = self.span.get_span_context()
        return {"trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}

    def replayed(self, count: int) -> None:
        if self.span is not None and count:
            self.span.add_event("stead.replay", {"stead.replay.records": count})


@contextlib.contextmanager
def attempt(*, run_id: str, epoch: int, worker_id: str, task_id: str | None, workflow: str,
            version: int, previous: Mapping[str, Any] | None) -> Iterator[Attempt]:
    """The span of an attempt, current while the workflow runs in it.
    `previous`: the span context the previous attempt journaled."""
    state = _STATE
    if state is None:
        yield Attempt()
        return
    from opentelemetry import trace

    attributes: dict[str, Any] = {
        "stead.run.id": run_id, "stead.run.epoch": epoch, "stead.worker.id": worker_id,
        "stead.workflow.name": workflow, "stead.workflow.version": version,
    }
    if task_id is not None:
        attributes["stead.task.id"] = task_id
    links = []
    linked = _span_context(previous)
    if linked is not None:
        links.append(trace.Link(linked, {"stead.link": "previous_attempt"}))
    with state.tracer.start_as_current_span(
            f"stead.run {workflow}", kind=trace.SpanKind.INTERNAL, attributes=attributes,
            links=links) as span:
        yield Attempt(span)


def _span_context(data: Mapping[str, Any] | None) -> Any:
    from opentelemetry import trace

    if data is None:
        return None
    try:
        ctx = trace.SpanContext(int(str(data["trace_id"]), 16), int(str(data["span_id"]), 16),
                                is_remote=True,
                                trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
    except (TypeError, KeyError, ValueError):
        return None
    return ctx if ctx.is_valid else None


# -- steps and effects -------------------------------------------------------------
_OFF = contextlib.nullcontext()


def call(kind: str, name: str, **attributes: Any) -> contextlib.AbstractContextManager[None]:
    """The span of a step or effect run live (attributes: `key`, `class`...)."""
    state = _STATE
    return _OFF if state is None else _call(state, kind, name, attributes)


@contextlib.contextmanager
def _call(state: _State, kind: str, name: str, attributes: Mapping[str, Any]) -> Iterator[None]:
    attrs = {"stead.call.kind": kind, "stead.call.name": name,
             **{f"stead.{kind}.{k}": v for k, v in attributes.items() if v is not None}}
    with state.tracer.start_as_current_span(f"stead.{kind} {name}", attributes=attrs):
        yield


# -- model calls ---------------------------------------------------------------------
class ModelCall:
    """What a model span learns when the answer comes."""

    def __init__(self, span: Span | None, state: _State | None,
                 metric: dict[str, Any]) -> None:
        self._span = span
        self._state = state
        self._metric = metric

    def answered(self, completion: Completion) -> None:
        span, state = self._span, self._state
        if span is None or state is None:
            return
        raw = completion.raw or {}
        usage = completion.usage
        attrs: dict[str, Any] = {
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
        }
        if usage.cached_tokens:
            attrs["gen_ai.usage.cache_read.input_tokens"] = usage.cached_tokens
        if usage.reasoning_tokens:
            attrs["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
        if isinstance(raw.get("id"), str):
            attrs["gen_ai.response.id"] = raw["id"]
        if completion.model:
            attrs["gen_ai.response.model"] = completion.model
        if completion.stop_reason:
            attrs["gen_ai.response.finish_reasons"] = [completion.stop_reason]
        if completion.request_id:
            attrs["stead.llm.request_id"] = completion.request_id
        if state.capture_content:
            attrs["gen_ai.output.messages"] = json.dumps([{
                "role": "assistant", "text": completion.text,
                "tool_calls": [c.to_json() for c in completion.tool_calls]}])
        span.set_attributes(attrs)
        for kind, count in (("input", usage.input_tokens), ("output", usage.output_tokens)):
            state.tokens.record(count, {**self._metric, "gen_ai.token.type": kind})


_REQUEST = {"temperature": "gen_ai.request.temperature", "top_p": "gen_ai.request.top_p",
            "max_tokens": "gen_ai.request.max_tokens", "seed": "gen_ai.request.seed",
            "max_output_tokens": "gen_ai.request.max_tokens"}


@contextlib.contextmanager
def model_call(name: str, model: Any, messages: Sequence[Any], params: Mapping[str, Any]
               ) -> Iterator[ModelCall]:
    """The span of a live model call (`run.llm`): GenAI conventions."""
    state = _STATE
    if state is None:
        yield ModelCall(None, None, {})
        return
    provider = str(getattr(model, "provider", "") or model.name)
    requested = str(getattr(model, "model", "") or model.name)
    request = dict(getattr(model, "defaults", {}) or {})
    request.update(params)
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
        "gen_ai.request.model": requested, "stead.call.kind": "llm", "stead.call.name": name,
    }
    for key, attr in _REQUEST.items():
        if isinstance(request.get(key), int | float) and not isinstance(request[key], bool):
            attrs[attr] = request[key]
    if state.capture_content:
        attrs["gen_ai.input.messages"] = json.dumps(list(messages), default=str)
    metric = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
              "gen_ai.request.model": requested}
    from opentelemetry import trace

    with state.tracer.start_as_current_span(f"chat {requested}", kind=trace.SpanKind.INTERNAL,
                                            attributes=attrs) as span:
        yield ModelCall(span, state, metric)
