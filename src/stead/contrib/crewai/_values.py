"""What a flow method returns and what a flow's state holds, as the JSON the
journal keeps: live and replayed, a method hands on the same value."""

from __future__ import annotations

import json
from typing import Any

from crewai.crews.crew_output import CrewOutput
from crewai.flow.human_feedback import HumanFeedbackResult
from pydantic import BaseModel

from stead import errors


def plain(value: Any, what: str) -> Any:
    """`value` as JSON: a crew's output as its text (`.raw`), a pydantic model
    as its JSON dump."""
    if isinstance(value, CrewOutput):
        return value.raw
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        raise errors.SteadError(
            f"{what} returned a {type(value).__name__}, which the journal cannot keep: return "
            "JSON values, a pydantic model or a crew's output") from None


def digestible(value: Any) -> Any:
    """What of a method's arguments enters its digest: their JSON; a human
    feedback result as its output, feedback and outcome (not its time); of
    anything else, its type."""
    if isinstance(value, list | tuple):
        return [digestible(v) for v in value]
    if isinstance(value, dict):
        return {str(k): digestible(v) for k, v in value.items()}
    if isinstance(value, HumanFeedbackResult):
        return {"output": digestible(value.output), "feedback": value.feedback,
                "outcome": value.outcome}
    try:
        return plain(value, "")
    except errors.SteadError:
        return type(value).__qualname__


def state(flow: Any) -> Any:
    return plain(flow.state, f"flow {type(flow).__name__}'s state")


def restore(flow: Any, data: Any) -> None:
    """Set the flow's state to what the journal holds, in place."""
    current = flow.state
    if isinstance(current, BaseModel):
        loaded = type(current).model_validate(data)
        for name in type(current).model_fields:
            setattr(current, name, getattr(loaded, name))
    elif isinstance(current, dict) and isinstance(data, dict):
        current.clear()
        current.update(data)
